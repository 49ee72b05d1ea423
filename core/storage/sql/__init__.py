"""Every statement of agentcron, named, by noun: each a function (or a constant) returning the
statement, or the where-clause its caller composes, saying what it reads or writes and what it
locks; the services and the run store only run them.

``runs`` (a claim's writes, an admission, a record, the writes made holding a schedule's row, a
queue's turn), ``leases`` (the runs a claim may take, taking, renewing and giving back their
leases), ``schedules``, ``tasks``, ``deliveries`` (a run's deliveries and its delivery lease),
``timeline`` (a schedule's runs by due time), ``history`` (the run history and its pruning),
``wakeups`` (the idle look, NOTIFY), ``clock`` (the database's clock), ``liveness`` (the liveness
locks), ``keys``, ``secrets``, and ``rows`` (a batch of rows as one parameter, where the two
databases differ). Callers import each from the module that defines it."""
