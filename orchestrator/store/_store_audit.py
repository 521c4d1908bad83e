"""OrchestratorStore's audit log: the sequencer's transaction, and the reads the AuditService answers
from (``orchestrator.audit_log.ports.AuditLogReader``) and the metrics report.

The entries themselves are written by the other parts, each in the transaction of its event.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from decisionflow.transparency import Checkpoint
from decisionflow.vocabulary import CaseId, OperationId
from orchestrator.audit_log.ports import LoggedLeaf, PublishedCheckpoint
from orchestrator.audit_log.progress import AuditStatus, SequencingPass
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.store import _audit_reads, _audit_tree
from orchestrator.store._store_base import StoreBase


class AuditMethods(StoreBase):
    """Sequencing the audit log, signing its checkpoints, and reading it (an AuditLogReader)."""

    def sequence_audit_log(
        self, limit: int, signer: CheckpointSigner | None, now: datetime, *, published: Checkpoint | None = None
    ) -> SequencingPass:
        """In one transaction under the sequencer's lock, give up to limit unsequenced entries the next
        indices, oldest entry first, with the perfect subtrees they complete; then, when signer is given
        and fewer than limit were waiting (the backlog is done), sign the sequenced size unless that key
        signed it already, or the tree does not extend published (the checkpoint published outside the
        database): then sign nothing and say why."""
        with self.transactions.write() as conn:
            _audit_tree.lock_txn(conn)
            tree, sequenced = _audit_tree.sequence_txn(conn, limit)
            checkpoint = refused = None
            if signer is not None and sequenced < limit:
                if published is not None:
                    refused = _audit_tree.extends_txn(conn, tree, published)
                if refused is None:
                    checkpoint = _audit_tree.sign_txn(conn, tree, signer, now)
        return SequencingPass(sequenced, tree.size, checkpoint, refused)

    def audit_status(self) -> AuditStatus:
        """The sequencer's backlog and its age, the log's size and its newest checkpoint, read together."""
        with self.transactions.read() as conn:
            return _audit_reads.status_txn(conn)

    def latest_checkpoint(self) -> PublishedCheckpoint | None:
        """The newest signed checkpoint of the audit log, None before the first is published."""
        with self.transactions.read() as conn:
            return _audit_reads.latest_checkpoint_txn(conn)

    def checkpoint(self, size: int) -> PublishedCheckpoint | None:
        """The audit log's checkpoint published at exactly this size (the newest key's), None when none was."""
        with self.transactions.read() as conn:
            return _audit_reads.checkpoint_txn(conn, size)

    def leaves(self, start: int, limit: int) -> Sequence[LoggedLeaf]:
        """Up to limit sequenced leaves of the audit log from index start, in index order."""
        with self.transactions.read() as conn:
            return _audit_reads.leaves_txn(conn, start, limit)

    def leaf_indices(self, operation_id: OperationId | None = None, case_id: CaseId | None = None) -> Sequence[int]:
        """The indices of every sequenced leaf of an operation, or of every operation of a case (both given:
        of that operation if it is the case's), ascending; ValueError when neither is given."""
        with self.transactions.read() as conn:
            return _audit_reads.leaf_indices_txn(conn, operation_id, case_id)

    def inclusion_proof(self, index: int, size: int) -> Sequence[bytes]:
        """RFC 9162 inclusion proof of leaf index in the tree of the first size leaves; InvalidTreeRange
        unless 0 ≤ index < size ≤ the sequenced size."""
        with self.transactions.read() as conn:
            return _audit_reads.inclusion_proof_txn(conn, index, size)

    def consistency_proof(self, old_size: int, new_size: int) -> Sequence[bytes]:
        """RFC 9162 consistency proof between the trees of old_size and new_size leaves; InvalidTreeRange
        unless 0 < old_size ≤ new_size ≤ the sequenced size."""
        with self.transactions.read() as conn:
            return _audit_reads.consistency_proof_txn(conn, old_size, new_size)
