"""The run ledger: the engine's verbs over the database, one module per noun.

- ``claim``: due schedules become leased ``pending`` runs; runs nobody holds are leased again;
- ``attempts``: admit an attempt (``running``) and record its outcome one by one;
- ``records``: record a batch of plain outcomes (one statement on PostgreSQL);
- ``leases``: renew what this instance holds, give runs back, delivery leases.

Every state change they write is one of ``core.transitions``. ``Ledger`` is all four over
one database, for one engine instance (``owner``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentcron.core.ledger.attempts import Attempts, breaker_note
from agentcron.core.ledger.claim import Claiming
from agentcron.core.ledger.records import Recording
from agentcron.core.ledger.store import RunStore
from agentcron.core.ledger.types import (
    Claim,
    Outcome,
    PreparedTask,
    StartDecision,
    TaskRef,
    Wakeup,
    error_excerpt,
    output_excerpt,
)


@dataclass
class Ledger(Claiming, Attempts, Recording):
    """Claim, admit, record and lease runs for the engine instance ``owner``: the SQL
    ``RunStore``."""


def _is_a_run_store(ledger: Ledger) -> RunStore:
    return ledger  # mypy checks here that the ledger keeps the store's contract


__all__ = [
    "Claim",
    "Ledger",
    "Outcome",
    "RunStore",
    "PreparedTask",
    "StartDecision",
    "TaskRef",
    "Wakeup",
    "breaker_note",
    "error_excerpt",
    "output_excerpt",
]
