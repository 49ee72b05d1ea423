"""The execution engine that the service's lifespan (and a host's ``agentcron.Engine``) starts.

- ``loop``: the scheduling loop: wake, claim, dispatch; ``stop()`` drains;
- ``run``: what happens to one run, from dispatch to its admission;
- ``attempt``: an admitted attempt, from its start to its record (its deadline, its verdict);
- ``leases``: the heartbeat that renews leases, and the fence that stops an attempt which may
  have lost its lease;
- ``slots``: how many runs one engine takes in hand, and when a waiting one is admitted;
- ``batching``: group commit, many runs' writes in one transaction;
- ``delivery``: delivering finished runs, under a delivery lease;
- ``supervisor``, ``metrics``, ``clockwatch``, ``heap``: keeping the engine's tasks alive (and
  the sleep a stop cuts short), its Prometheus metrics, the database's clock, the frozen heap
  of a started service.
"""
