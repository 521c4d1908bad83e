"""The audit log's sequencer and checkpoint signer, off the request path.

``publish`` sequences every entry waiting, ``BATCH`` per transaction under the sequencer's lock (one
sequencer at a time across every worker and replica), then signs the sequenced size with the log's
key when one is set (``OrchestratorStore.sequence_audit_log``). ``audit_job`` runs it in the server
(``AuditSequencer`` as a periodic job, decisionflow_server.runtime.periodic), once at start and then
every ``--audit-interval-seconds``; ``decisionflow-orchestrator audit-checkpoint`` runs it once. An
entry is therefore in the log, with an index and a proof, at most one interval (and the time of a
pass) after its event committed, and in a signed checkpoint as soon as it is in the log.

With ``--audit-publish-dir`` (``orchestrator.audit.publication``) each pass first reads the checkpoint
published there, signs only a tree that extends it, and then publishes the newest checkpoint of the
database. A pass that would not sign says why (``Publication.refused``); ``AuditSequencer`` logs that
once, reports it to the metrics, and says when the log extends the published checkpoint again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from decisionflow.transparency import Checkpoint
from decisionflow_server.runtime.periodic import PeriodicJob, PeriodicMetrics, Schedule, Wording
from orchestrator.audit.publication import CheckpointDirectory, PublishedNote, UnreadablePublication
from orchestrator.audit_log.ports import PublishedCheckpoint
from orchestrator.audit_log.progress import BATCH, SigningRefused
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.store import OrchestratorStore

logger = logging.getLogger("decisionflow.orchestrator")


@dataclass(frozen=True, slots=True)
class Publication:
    """What one run of the sequencer did: entries sequenced, the log's size, the checkpoint it signed, the
    checkpoint it published outside the database, and why it signed nothing when it refused to."""

    sequenced: int
    size: int
    signed: PublishedCheckpoint | None
    published: PublishedCheckpoint | None = None
    refused: SigningRefused | None = None


def _published(directory: CheckpointDirectory, signer: CheckpointSigner) -> PublishedNote | SigningRefused | None:
    """The checkpoint published in directory, or why nothing may be signed against it."""
    try:
        note = directory.latest()
    except UnreadablePublication as unreadable:
        return SigningRefused(0, 0, f"the published checkpoint cannot be read: {unreadable}")
    if note is not None and note.checkpoint.origin != signer.origin:
        return SigningRefused(
            note.checkpoint.size,
            0,
            f"{directory.checkpoint_file} holds a checkpoint of the log {note.checkpoint.origin!r}, not of "
            f"{signer.origin!r}: a new log needs a publication directory of its own",
        )
    return note


def publish(
    store: OrchestratorStore,
    signer: CheckpointSigner | None,
    clock: Callable[[], datetime],
    *,
    directory: CheckpointDirectory | None = None,
    batch: int = BATCH,
) -> Publication:
    """Sequence every entry waiting, then sign the sequenced size (when signer is set, that key has not
    signed it yet, and the tree extends the checkpoint published in directory); each transaction holds the
    sequencer's lock. Then publish the database's newest checkpoint to directory when it is larger."""
    published = _published(directory, signer) if directory is not None and signer is not None else None
    if isinstance(published, SigningRefused):
        # Nothing is signed while the publication cannot be compared; entries are still sequenced.
        done = _sequence(store, None, clock, batch, None)
        return Publication(done.sequenced, done.size, None, refused=dataclasses.replace(published, size=done.size))
    done = _sequence(store, signer, clock, batch, None if published is None else published.checkpoint)
    if done.refused is not None or directory is None or signer is None:
        return done
    latest = store.latest_checkpoint()
    if latest is None or (published is not None and latest.size <= published.checkpoint.size):
        return done
    # Not refused: the database's tree extends what was published, and so does every checkpoint of it.
    return dataclasses.replace(done, published=latest if directory.publish(latest.signed_note) else None)


def _sequence(
    store: OrchestratorStore,
    signer: CheckpointSigner | None,
    clock: Callable[[], datetime],
    batch: int,
    published: Checkpoint | None,
) -> Publication:
    total = 0
    while True:
        done = store.sequence_audit_log(batch, signer, clock(), published=published)
        total += done.sequenced
        if done.sequenced < batch:
            return Publication(total, done.size, done.checkpoint, refused=done.refused)


JOB = "audit-sequencer"
# The sequencer's own lines since it began (docs/observability.md and the alerts' runbooks cite them).
SEQUENCER_WORDING = Wording(
    paused="audit log: sequencing paused, %s; trying again every %g s (entries wait in their table)",
    resumed="audit log: sequencing resumed after %d failed passes",
    failed="sequencing the audit log failed; trying again in %.0f s",
)


class AuditSequencer:
    """One pass of ``publish`` at a time, with what the passes before it refused: a refusal to sign is
    logged once at ERROR, when it starts or its reason changes, and its end once at WARNING; on_refused
    hears True or False after every pass (the metrics' gauge)."""

    def __init__(
        self,
        store: OrchestratorStore,
        signer: CheckpointSigner | None,
        clock: Callable[[], datetime],
        *,
        directory: CheckpointDirectory | None = None,
        on_refused: Callable[[bool], None] = lambda refused: None,
    ) -> None:
        self._store = store
        self._signer = signer
        self._clock = clock
        self._directory = directory
        self._on_refused = on_refused
        self._refused: SigningRefused | None = None

    async def run_once(self) -> Publication:
        """Sequence, sign and publish once, in a worker thread."""
        done = await asyncio.to_thread(publish, self._store, self._signer, self._clock, directory=self._directory)
        if done.signed is not None:
            logger.debug(
                "audit log: %d entries sequenced, checkpoint of size %d signed", done.sequenced, done.signed.size
            )
        self._report(done.refused)
        return done

    def _report(self, refused: SigningRefused | None) -> None:
        was, self._refused = self._refused, refused
        self._on_refused(refused is not None)
        if refused is not None and (was is None or was.reason != refused.reason):
            logger.error(
                "audit log: not signing a checkpoint of size %d: %s. Nothing is signed until the log extends "
                "the published checkpoint again (docs/operations.md, \"After restoring the orchestrator's "
                'database")',
                refused.size,
                refused.reason,
                extra={"service": "orchestrator"},
            )
        elif refused is None and was is not None:
            logger.warning(
                "audit log: the log extends the published checkpoint of size %d again; signing checkpoints again",
                was.published_size,
                extra={"service": "orchestrator"},
            )


def audit_job(
    store: OrchestratorStore,
    signer: CheckpointSigner | None,
    interval: float,
    clock: Callable[[], datetime],
    *,
    directory: CheckpointDirectory | None = None,
    on_refused: Callable[[bool], None] = lambda refused: None,
    metrics: PeriodicMetrics | None = None,
) -> PeriodicJob | None:
    """Return the server's sequencer job (``AuditSequencer`` once at start and then every interval; a pass
    that fails is logged and the next one tries again, nothing is lost: the entries wait in their table),
    None when the interval is 0 (``audit-checkpoint`` runs it instead);
    say once, at start, when no checkpoint will be signed or none published."""
    if signer is None:
        logger.info(
            "audit log: no --audit-signing-key-file, so its entries are written and sequenced but no checkpoint "
            "is signed (docs/audit-log.md)",
            extra={"service": "orchestrator"},
        )
    else:
        if signer.key.name != signer.origin:
            logger.warning(
                "audit log: the signing key is named %r but the checkpoints' origin is %r; auditors expect them alike",
                signer.key.name,
                signer.origin,
                extra={"service": "orchestrator"},
            )
        if directory is None:
            logger.info(
                "audit log: no --audit-publish-dir, so checkpoints are kept only in the database and a restore "
                "of an older copy of it would sign a fork of the log (docs/audit-log.md)",
                extra={"service": "orchestrator"},
            )
    if interval <= 0:
        return None
    sequencer = AuditSequencer(store, signer, clock, directory=directory, on_refused=on_refused)
    # Every replica runs it: the exclusion sequencing needs is the lock each of its transactions takes.
    return PeriodicJob(
        JOB, sequencer.run_once, Schedule(interval), logger=logger, wording=SEQUENCER_WORDING, metrics=metrics
    )
