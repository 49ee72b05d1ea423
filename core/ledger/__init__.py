"""The run ledger: the engine's verbs over the runs it claims, admits, runs and records.

- ``store``: the ``RunStore`` contract (what holds after each verb, what it locks) and the
  values the verbs take and give back;
- ``sql``: ``SqlRunStore``, the contract over SQLite or PostgreSQL, one path for every run;
- ``deliveries``: ``SqlDeliveries``, the delivery leases of finished runs;
- ``memory``: ``MemoryRunStore``, the contract over dicts, for tests of the engine's logic.

What each verb decides comes from ``core.planning`` (a claim), ``core.admission`` (an
admission) and ``core.transitions`` (every value written).
"""
