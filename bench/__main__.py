"""``python -m bench``: the benchmark workloads (see ``bench.harness``)."""

from bench.harness import main

main()
