"""The benchmark harness of agentcron (``python -m bench``; see docs/benchmarks.md).

Everything under ``bench.adapters`` and ``bench.noop`` imports only the standard library at
module level, so the peers' own virtual environments can run them from the repository root.
"""
