"""The audit log's sequencer and checkpoint signer, off the request path.

``publish`` sequences every entry waiting, ``BATCH`` per transaction under the sequencer's lock (one
sequencer at a time across every worker and replica), then signs the sequenced size with the log's
key when one is set (``OrchestratorStore.sequence_audit_log``). ``AuditJob`` runs it in the server,
once at start and then every ``--audit-interval-seconds``; ``decisionflow-orchestrator
audit-checkpoint`` runs it once. An entry is therefore in the log, with an index and a proof, at most
one interval (and the time of a pass) after its event committed, and in a signed checkpoint as soon
as it is in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from orchestrator.audit.ports import PublishedCheckpoint
from orchestrator.audit.signing import CheckpointSigner
from orchestrator.store import OrchestratorStore

logger = logging.getLogger("decisionflow.orchestrator")

# Entries per transaction: a backlog never holds SQLite's write turn, or the lock, for long (one pass
# of 1,000 entries took 15 to 45 ms on SQLite and 45 to 80 ms on PostgreSQL on a 2-core test machine).
BATCH = 1000


@dataclass(frozen=True, slots=True)
class Publication:
    """What one run of the sequencer did: entries sequenced, the log's size, the checkpoint it signed."""

    sequenced: int
    size: int
    signed: PublishedCheckpoint | None


def publish(
    store: OrchestratorStore,
    signer: CheckpointSigner | None,
    clock: Callable[[], datetime],
    *,
    batch: int = BATCH,
) -> Publication:
    """Sequence every entry waiting, then sign the sequenced size (when signer is set and that key has not
    signed it yet); each transaction holds the sequencer's lock."""
    total = 0
    while True:
        done = store.sequence_audit_log(batch, signer, clock())
        total += done.sequenced
        if done.sequenced < batch:
            return Publication(total, done.size, done.checkpoint)


class AuditJob:
    """Runs ``publish`` once at start and then every interval while the server runs; a run that fails
    is logged and the next one tries again (nothing is lost: the entries wait in their table)."""

    def __init__(
        self,
        store: OrchestratorStore,
        signer: CheckpointSigner | None,
        interval: float,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._signer = signer
        self._interval = interval
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the periodic runs on the running event loop."""
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop the periodic runs (a transaction in flight commits or rolls back on its own)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def run_once(self) -> Publication:
        """Sequence and sign once, in a worker thread."""
        done = await asyncio.to_thread(publish, self._store, self._signer, self._clock)
        if done.signed is not None:
            logger.debug(
                "audit log: %d entries sequenced, checkpoint of size %d signed", done.sequenced, done.signed.size
            )
        return done

    async def _run(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                logger.exception("sequencing the audit log failed; trying again in %.0f s", self._interval)
            await asyncio.sleep(self._interval)


def audit_job(
    store: OrchestratorStore, signer: CheckpointSigner | None, interval: float, clock: Callable[[], datetime]
) -> AuditJob | None:
    """Return the server's sequencer job, None when the interval is 0 (``audit-checkpoint`` runs it instead);
    say once, at start, when no checkpoint will be signed."""
    if signer is None:
        logger.info(
            "audit log: no --audit-signing-key-file, so its entries are written and sequenced but no checkpoint "
            "is signed (docs/audit-log.md)",
            extra={"service": "orchestrator"},
        )
    elif signer.key.name != signer.origin:
        logger.warning(
            "audit log: the signing key is named %r but the checkpoints' origin is %r; auditors expect them alike",
            signer.key.name,
            signer.origin,
            extra={"service": "orchestrator"},
        )
    if interval <= 0:
        return None
    return AuditJob(store, signer, interval, clock)
