"""The audit log's tree: ``AuditTreeMethods.sequence_audit_log`` sequences entries into it and signs
its checkpoints in one transaction under the sequencer's lock (``lock_txn``), over helpers that join it.

The sequencer takes the entries without an index in entry-id order and gives them the next indices,
size, size + 1, ... in one transaction, storing the hash of every perfect subtree each new leaf
completes (``CompactRange.append``). Under the lock the size it starts from is the committed one,
so indices never leave a gap and, once committed, never change; the unique index on ``leaf_index``
would refuse a second sequencer's duplicate even without it. A checkpoint is signed only of the
sequenced size: a contiguous prefix of committed leaves, and only of a tree that extends the checkpoint
published outside the database (``extends_txn``), so a database restored from an older copy never signs
a fork.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime

import sqlalchemy as sa

from decisionflow.transparency import Checkpoint, CompactRange, StoredNode, perfect_subtrees
from orchestrator.audit_log.ports import PublishedCheckpoint
from orchestrator.audit_log.progress import SequencingPass, SigningRefused
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.schema import audit_checkpoints, audit_entries, audit_nodes
from orchestrator.store._store_base import StoreBase

# PostgreSQL's advisory lock of the sequencer: one 64-bit key, the first 8 bytes of a name's SHA-256.
SEQUENCER_LOCK_KEY = int.from_bytes(hashlib.sha256(b"decisionflow.audit.sequencer").digest()[:8], "big", signed=True)

_ASSIGN_INDEX = (
    audit_entries.update()
    .where(audit_entries.c.entry_id == sa.bindparam("b_entry_id"))
    .values(leaf_index=sa.bindparam("b_leaf_index"))
)
_INSERT_NODE = audit_nodes.insert()
_INSERT_CHECKPOINT = audit_checkpoints.insert()


def lock_txn(conn: sa.Connection) -> None:
    """Take the sequencer's lock until the transaction ends. On PostgreSQL an advisory transaction lock
    (replicas sequence one at a time); SQLite's write transaction (BEGIN IMMEDIATE) already excludes
    every other writer."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SEQUENCER_LOCK_KEY)))


def size_txn(conn: sa.Connection) -> int:
    """The number of sequenced leaves: one more than the highest index (indices have no gap)."""
    # The condition names the partial index's own: only sequenced entries are in it.
    highest = conn.execute(
        sa.select(sa.func.max(audit_entries.c.leaf_index)).where(audit_entries.c.leaf_index.is_not(None))
    ).scalar_one_or_none()
    return 0 if highest is None else int(highest) + 1


def nodes_txn(conn: sa.Connection, wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored hashes of the perfect subtrees wanted, as (level, index) → hash, in one statement."""
    by_level: dict[int, set[int]] = {}
    for level, index in wanted:
        by_level.setdefault(level, set()).add(index)
    if not by_level:
        return {}
    condition = sa.or_(
        *(
            sa.and_(audit_nodes.c.level == level, audit_nodes.c.node_index.in_(sorted(indices)))
            for level, indices in sorted(by_level.items())
        )
    )
    rows = conn.execute(sa.select(audit_nodes.c.level, audit_nodes.c.node_index, audit_nodes.c.hash).where(condition))
    return {(int(row.level), int(row.node_index)): bytes(row.hash) for row in rows}


class NodeLookup:
    """The hashes of perfect subtrees read ahead, looked up as ``decisionflow.transparency`` asks for them."""

    def __init__(self, nodes: Mapping[tuple[int, int], bytes]) -> None:
        self._nodes = nodes

    def __call__(self, level: int, index: int) -> bytes:
        try:
            return self._nodes[(level, index)]
        except KeyError:
            raise LookupError(
                f"the audit log has no stored hash of the subtree at level {level}, index {index}"
            ) from None


def tree_txn(conn: sa.Connection, size: int) -> CompactRange:
    """The compact range of the first size leaves, from their stored perfect subtrees."""
    return CompactRange.at_size(size, NodeLookup(nodes_txn(conn, perfect_subtrees(0, size))))


def sequence_txn(conn: sa.Connection, limit: int) -> tuple[CompactRange, int]:
    """Give up to limit unsequenced entries, oldest entry first, the next indices; store the subtrees they
    complete. Return the log's compact range after them and how many were sequenced."""
    size = size_txn(conn)
    tree = tree_txn(conn, size)
    pending = conn.execute(
        sa.select(audit_entries.c.entry_id, audit_entries.c.leaf_hash)
        .where(audit_entries.c.leaf_index.is_(None))
        .order_by(audit_entries.c.entry_id)
        .limit(limit)
    ).all()
    if not pending:
        return tree, 0
    assigned: list[dict[str, object]] = []
    completed: list[StoredNode] = []
    for row in pending:
        assigned.append({"b_entry_id": row.entry_id, "b_leaf_index": tree.size})
        tree, nodes = tree.append(bytes(row.leaf_hash))
        completed.extend(nodes)
    conn.execute(_ASSIGN_INDEX, assigned)
    conn.execute(_INSERT_NODE, [{"level": n.level, "node_index": n.index, "hash": n.hash} for n in completed])
    return tree, len(pending)


def sign_txn(
    conn: sa.Connection, tree: CompactRange, signer: CheckpointSigner, now: datetime
) -> PublishedCheckpoint | None:
    """Sign and store the checkpoint of the tree, unless its size is 0 or this key signed that size already."""
    if tree.size == 0:
        return None  # nothing to vouch for; every tree extends the empty one
    signed = conn.execute(
        sa.select(sa.literal(1)).where(
            audit_checkpoints.c.size == tree.size, audit_checkpoints.c.key_id == signer.key_id
        )
    ).first()
    if signed is not None:
        return None
    root = tree.root()
    note = signer.sign(tree.size, root)
    conn.execute(
        _INSERT_CHECKPOINT,
        {"size": tree.size, "key_id": signer.key_id, "root_hash": root, "signed_note": note, "signed_at": now},
    )
    return PublishedCheckpoint(tree.size, root, note, now)


def extends_txn(conn: sa.Connection, tree: CompactRange, published: Checkpoint) -> SigningRefused | None:
    """None when the tree extends the published checkpoint (its first published.size leaves hash to the
    published root), else why not. The stored subtrees give that prefix's root without reading a leaf."""
    if tree.size < published.size:
        return SigningRefused(
            published.size,
            tree.size,
            f"the database's audit log holds {tree.size} leaves, fewer than the {published.size} of the "
            "published checkpoint: the database is older than what the log has published",
        )
    prefix = tree if tree.size == published.size else tree_txn(conn, published.size)
    if prefix.root() != published.root_hash:
        return SigningRefused(
            published.size,
            tree.size,
            f"the first {published.size} leaves of the database's audit log hash to another root than the "
            "published checkpoint's: the log in the database has forked from what was published",
        )
    return None


class AuditTreeMethods(StoreBase):
    """The sequencer's transaction: indices for the entries the other parts wrote, and a signed checkpoint."""

    def sequence_audit_log(
        self, limit: int, signer: CheckpointSigner | None, now: datetime, *, published: Checkpoint | None = None
    ) -> SequencingPass:
        """In one transaction under the sequencer's lock, give up to limit unsequenced entries the next
        indices, oldest entry first, with the perfect subtrees they complete; then, when signer is given
        and fewer than limit were waiting (the backlog is done), sign the sequenced size unless that key
        signed it already, or the tree does not extend published (the checkpoint published outside the
        database): then sign nothing and say why."""
        with self.transactions.write() as conn:
            lock_txn(conn)
            tree, sequenced = sequence_txn(conn, limit)
            checkpoint = refused = None
            if signer is not None and sequenced < limit:
                if published is not None:
                    refused = extends_txn(conn, tree, published)
                if refused is None:
                    checkpoint = sign_txn(conn, tree, signer, now)
        return SequencingPass(sequenced, tree.size, checkpoint, refused)
