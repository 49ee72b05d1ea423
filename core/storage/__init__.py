"""SQLAlchemy 2 async storage: ``database`` (``Database``: the engine, its sessions and what
the backend can do), ``models`` (the tables as ORM classes), ``types`` (column types alike on
SQLite and PostgreSQL), and the engine's statements, wake-ups, migrations and guards beside
them. Callers import each from the module that defines it."""
