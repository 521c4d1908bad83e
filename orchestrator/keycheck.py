"""The start-up key check: pending reviews whose checkpoints no configured key opens.

A checkpoint key removed from the key list (or replaced instead of rotated) leaves every review
sealed under it unable to resume: its Approve answers DATA_LOSS CHECKPOINT_INTEGRITY. Counting
those reviews once at start turns a stream of failed Approves into one warning line that names the
remedy. Only the seal is checked (one HMAC per row, nothing decoded), on at most ``LIMIT`` of the
oldest pending reviews, so a start stays quick whatever the backlog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from decisionflow.vocabulary import OperationId
from orchestrator.checkpoints import CheckpointSealer
from orchestrator.errors import CheckpointIntegrity
from orchestrator.store import OrchestratorStore

logger = logging.getLogger("decisionflow.orchestrator")

LIMIT = 2000


@dataclass(frozen=True, slots=True)
class KeyCheck:
    """How many pending reviews' checkpoints were checked, and how many no configured key opens (the
    first of them named, None when there is none)."""

    checked: int
    unreadable: int
    first_operation_id: OperationId | None = None

    @property
    def complete(self) -> bool:
        """False when the check stopped at LIMIT and more pending reviews may exist."""
        return self.checked < LIMIT


def check_checkpoint_keys(store: OrchestratorStore, sealer: CheckpointSealer, *, limit: int = LIMIT) -> KeyCheck:
    """Count the pending reviews (at most limit, oldest first) whose checkpoint fails its seal under every key."""
    unreadable: list[OperationId] = []
    sealed = store.housekeeping.pending_checkpoints(limit)
    for checkpoint in sealed:
        try:
            sealer.verify(checkpoint)
        except CheckpointIntegrity:
            unreadable.append(checkpoint.operation_id)
    return KeyCheck(len(sealed), len(unreadable), unreadable[0] if unreadable else None)


def warn_unreadable_checkpoints(check: KeyCheck) -> None:
    """Log one warning naming the count and the remedy when a pending review cannot be resumed."""
    if not check.unreadable:
        return
    counted = f"{check.unreadable}" if check.complete else f"at least {check.unreadable} (of the oldest {LIMIT})"
    logger.warning(
        "%s pending review(s) cannot be resumed: their checkpoints fail the integrity check under every "
        "configured checkpoint key, so their Approve answers DATA_LOSS CHECKPOINT_INTEGRITY (e.g. %s). Put the "
        "key that sealed them back into the checkpoint key list after the signing key (a later key only "
        "verifies); if that key is lost, those reviews must be started again with an edited proposal "
        "(reopen-reviews re-opens reviews of another workflow graph, not of a lost key)",
        counted,
        check.first_operation_id,
        extra={"service": "orchestrator", "operation_id": check.first_operation_id},
    )
