"""What every part of OrchestratorStore shares: the transactions, the checkpoint table, the operator's
housekeeping, and the hook told of each committed write of checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.engine import Engine

from decisionflow_server.storage.transactions import Transactions
from orchestrator.domain import SealedCheckpoint
from orchestrator.store._checkpoints import CheckpointTable
from orchestrator.store._housekeeping import Housekeeping


class StoreBase:
    """The store's transactions and tables; each part of OrchestratorStore adds the methods of one concept."""

    def __init__(self, engine: Engine, *, on_checkpoints_written: Callable[[int], None] | None = None) -> None:
        self.transactions = Transactions(engine, database="orchestrator")
        # Told the state bytes of the checkpoints each committed transaction wrote (metrics).
        self._checkpoints_written = on_checkpoints_written or (lambda _: None)
        self.checkpoints = CheckpointTable(self.transactions)
        self.housekeeping = Housekeeping(self.transactions, self.checkpoints)

    @property
    def engine(self) -> Engine:
        """The engine this store runs its transactions on."""
        return self.transactions.engine

    def _wrote(self, saved: Sequence[SealedCheckpoint]) -> None:
        if saved:
            self._checkpoints_written(sum(len(c.state) for c in saved))
