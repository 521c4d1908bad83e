"""The orchestrator's audit log after a campaign run: checked as an auditor checks it, and against the
orchestrator's own tables.

``LogAuditor(url).check()`` opens the orchestrator's database, runs the sequencer once
(``orchestrator.audit.sequencer.publish`` with a test signing key, ``SIGNER``)
so that every entry committed before it has an index and the sequenced size a signed checkpoint,
then reads the log and the tables in one snapshot and checks:

    entries      every committed entry has an index; the indices are 0 … n-1, no gap, no repeat;
                 each leaf decodes and encodes back to its very bytes; its stored hash is its leaf
                 hash; its kind and operation id columns are the leaf's
    tree         every stored subtree hash (audit_nodes, which every proof the store serves is
                 made of) is the one recomputed from the leaves' bytes, none missing, none extra
    checkpoints  (the test key's) each opens with the verifier key and the origin, states the size
                 and root stored beside it, and its root is the tree hash of the first size leaves,
                 recomputed from their bytes (so every leaf is in the latest, which must cover them
                 all); the store's consistency proof from every earlier checkpoint, and from the
                 latest one this auditor saw on its last run, to the latest verifies; the store's
                 inclusion proofs of the leaves new since the last run verify against the latest (at
                 most PROOF_SAMPLE of them, evenly spread, first and last included: each costs the
                 store about 3 ms, and the stored hashes they are made of are all checked above)
    history      the leaves read in index order (decisionflow.transparency.History): each proposal
                 recomputes its operation id, a decision follows its proposal and is the only one, an
                 effect, rejection or settlement follows an approval
    tables       exactly one decision leaf per row of ``decisions``, with its operation id, decision,
                 reviewer and time, and no decision leaf of an operation without a row; a proposal
                 leaf for every row of ``proposals``, and none of an operation without a row
    outcomes     exactly one outcome leaf per operation the ``operations`` table holds as COMMITTED
                 (an effect or a COMMITTED settlement leaf, with the row's receipt id, the receiver's
                 applied time and the time of the row's state change), REJECTED (a rejection leaf with
                 the reason stored) or EXPIRED (an expiry leaf at the time of the change), and none of
                 an operation the table holds in another state

Each failure is one line naming the leaf (by index) or the operation. The campaigns' orchestrators
keep their own sequencer (``--audit-interval-seconds``, no signing key): a second publisher is safe,
since each pass holds the sequencer's lock, and the check runs once the run has settled. Should a
server still commit an entry after the pass, that entry is unsequenced in the snapshot: the check
then publishes and reads again, and only an entry left without an index by a pass that began after
it was seen is a failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import sqlalchemy as sa

from decisionflow.transparency import (
    Checkpoint,
    CompactRange,
    DecisionLeaf,
    EffectLeaf,
    ExpiryLeaf,
    History,
    HistoryError,
    Leaf,
    NoteSigner,
    NoteVerifier,
    ProposalLeaf,
    RejectionLeaf,
    SettlementLeaf,
    TransparencyError,
    decode_leaf,
    encode_leaf,
    leaf_hash,
    open_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from decisionflow.vocabulary import Decision, OperationState
from decisionflow_server.storage import db
from orchestrator.audit.sequencer import publish
from orchestrator.audit_log.ports import PublishedCheckpoint
from orchestrator.audit_log.signing import CheckpointSigner
from orchestrator.schema import audit_checkpoints, audit_entries, audit_nodes, decisions, operations, proposals
from orchestrator.store import OrchestratorStore

ORIGIN = "campaign.test/audit"
# The tests' own key (a fixed seed: a failing run replays with the same signatures); never a real log's.
SIGNER = CheckpointSigner(ORIGIN, NoteSigner.from_seed(ORIGIN, bytes(range(100, 132))))
# Passes of the sequencer before an entry still without an index counts as missed (one suffices when
# nothing writes meanwhile, as after a settled run).
PUBLISH_ATTEMPTS = 5
# Inclusion proofs asked of the store per check (measured: 2.8 ms each on SQLite, so 1,000 leaves' proofs
# took 2.8 s, against 0.3 s for the rest of the check).
PROOF_SAMPLE = 64


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of audit_entries as read."""

    entry_id: int
    leaf_index: int | None
    kind: str
    operation_id: str
    data: bytes
    stored_hash: bytes

    def describe(self) -> str:
        """``leaf 7 (decision of op-v1-…)``, or the entry id while it has no index."""
        where = f"leaf {self.leaf_index}" if self.leaf_index is not None else f"entry {self.entry_id} (no index)"
        return f"{where} ({self.kind} of {self.operation_id})"


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """One row of the decisions table."""

    decision: str
    reviewer: str
    decided_at: datetime


@dataclass(frozen=True, slots=True)
class RecordedOutcome:
    """One row of the operations table in a state an outcome leaf records: what the leaf must say."""

    state: OperationState
    changed_at: datetime
    receipt_id: str | None
    applied_at: datetime | None
    rejection_reason: str | None


# The states an outcome leaf records, and the kinds of leaf that may record each.
OUTCOME_KINDS = {
    OperationState.COMMITTED: ("effect", "settlement"),
    OperationState.REJECTED: ("rejection",),
    OperationState.EXPIRED: ("expiry",),
}
OutcomeLeaf = EffectLeaf | SettlementLeaf | RejectionLeaf | ExpiryLeaf


@dataclass(frozen=True)
class Snapshot:
    """The log and the tables it must match, read in one transaction."""

    entries: list[Entry]
    nodes: dict[tuple[int, int], bytes]  # (level, node_index) → hash
    decisions: dict[str, RecordedDecision]
    proposals: frozenset[str]
    checkpoints: list[PublishedCheckpoint]  # the test key's, by size
    outcomes: dict[str, RecordedOutcome]  # the operations in a state of OUTCOME_KINDS

    @property
    def unsequenced(self) -> frozenset[int]:
        """The entry ids without an index."""
        return frozenset(e.entry_id for e in self.entries if e.leaf_index is None)

    @property
    def sequenced(self) -> list[Entry]:
        """The entries with an index, in index order."""
        return sorted((e for e in self.entries if e.leaf_index is not None), key=lambda e: e.leaf_index or 0)


@dataclass(frozen=True)
class AuditCheck:
    """What one check read and found: its figures and its failures (empty when the log holds)."""

    leaves: int
    decisions: int
    proposals: int
    outcomes: int  # operations whose outcome leaf was compared with their row
    checkpoints: int
    proofs: int
    seconds: float
    failures: list[str]


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def read_snapshot(engine: sa.Engine, key_id: str) -> Snapshot:
    """The entries, decisions, proposals and the key's checkpoints, as one snapshot of the database."""
    with db.reading(engine) as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            entries = [
                Entry(
                    int(r.entry_id),
                    None if r.leaf_index is None else int(r.leaf_index),
                    str(r.kind),
                    str(r.operation_id),
                    bytes(r.leaf),
                    bytes(r.leaf_hash),
                )
                for r in conn.execute(sa.select(audit_entries).order_by(audit_entries.c.entry_id))
            ]
            nodes = {
                (int(r.level), int(r.node_index)): bytes(r.hash)
                for r in conn.execute(sa.select(audit_nodes.c.level, audit_nodes.c.node_index, audit_nodes.c.hash))
            }
            recorded = {
                # The column holds the decision's label (approve), a leaf its name (APPROVE).
                str(r.operation_id): RecordedDecision(
                    Decision.parse(str(r.decision)).value, str(r.reviewer), _utc(r.decided_at)
                )
                for r in conn.execute(sa.select(decisions))
            }
            proposed = frozenset(str(op) for op in conn.execute(sa.select(proposals.c.operation_id)).scalars())
            outcomes = {
                str(r.operation_id): RecordedOutcome(
                    OperationState(str(r.state).upper()),  # the column holds the label (committed)
                    _utc(r.state_changed_at),
                    r.receipt_id,
                    None if r.receipt_applied_at is None else _utc(r.receipt_applied_at),
                    r.rejection_reason,
                )
                for r in conn.execute(
                    sa.select(operations).where(operations.c.state.in_([s.label for s in OUTCOME_KINDS]))
                )
            }
            checkpoints = [
                PublishedCheckpoint(int(r.size), bytes(r.root_hash), str(r.signed_note), r.signed_at)
                for r in conn.execute(
                    sa.select(audit_checkpoints)
                    .where(audit_checkpoints.c.key_id == key_id)
                    .order_by(audit_checkpoints.c.size)
                )
            ]
    return Snapshot(entries, nodes, recorded, proposed, checkpoints, outcomes)


@dataclass
class LogAuditor:
    """Checks one orchestrator database's audit log after each run, keeping what it saw between runs:
    the latest checkpoint it opened, how many leaves it has proved included, and the failures it has
    reported (each is reported once, by the first check that finds it: a campaign that checks after
    every crash gathers every check's failures, and a leaf missing since the first crash would otherwise
    be named again under each later one)."""

    url: str
    signer: CheckpointSigner = SIGNER
    kept: Checkpoint | None = None
    proved: int = 0
    checks: list[AuditCheck] = field(default_factory=list)
    reported: set[str] = field(default_factory=set)

    def check(self) -> AuditCheck:
        """Publish once, then check the log against itself, its checkpoints and the orchestrator's tables."""
        started = time.monotonic()
        snapshot: Snapshot | None = None
        proofs = 0
        engine = db.create_engine(self.url, pool_size=1)
        try:
            store = OrchestratorStore(engine)
            failures, snapshot = self._publish(store, engine)
            leaves, found = _entry_failures(snapshot.sequenced)
            roots, tree_found = _tree_failures(snapshot)
            checkpoints_found, proofs = self._checkpoint_failures(store, snapshot, roots)
            failures += found + tree_found + checkpoints_found
            failures += _history_failures(snapshot.sequenced) + _table_failures(snapshot, leaves)
            failures += _outcome_failures(snapshot, leaves)
        except Exception as error:  # the check itself breaking (a database unreachable) fails the run too
            failures = [f"the check failed: {type(error).__name__}: {error}"]
        finally:
            engine.dispose()
        sequenced = snapshot.sequenced if snapshot else []
        named = [f"audit log: {failure}" for failure in failures]
        result = AuditCheck(
            leaves=len(sequenced),
            decisions=sum(1 for e in sequenced if e.kind == "decision"),
            proposals=sum(1 for e in sequenced if e.kind == "proposal"),
            outcomes=len(snapshot.outcomes) if snapshot else 0,
            checkpoints=len(snapshot.checkpoints) if snapshot else 0,
            proofs=proofs,
            seconds=round(time.monotonic() - started, 2),
            failures=[failure for failure in named if failure not in self.reported],
        )
        self.reported.update(result.failures)
        self.checks.append(result)
        return result

    def figures(self) -> dict[str, int | float]:
        """What a campaign reports (``audit_*``): the checks run, the last one's leaves, decision leaves, outcomes
        compared and checkpoints, the violations of them all, and the seconds they added (in all, and the longest)."""
        last = self.checks[-1] if self.checks else AuditCheck(0, 0, 0, 0, 0, 0, 0.0, [])
        return {
            "audit_checks": len(self.checks),
            "audit_leaves": last.leaves,
            "audit_decisions": last.decisions,
            "audit_outcomes": last.outcomes,
            "audit_checkpoints": last.checkpoints,
            "audit_violations": sum(len(c.failures) for c in self.checks),
            "audit_seconds": round(sum(c.seconds for c in self.checks), 2),
            "audit_seconds_max": max((c.seconds for c in self.checks), default=0.0),
        }

    def _publish(self, store: OrchestratorStore, engine: sa.Engine) -> tuple[list[str], Snapshot]:
        seen: frozenset[int] = frozenset()
        for _ in range(PUBLISH_ATTEMPTS):
            publish(store, self.signer, lambda: datetime.now(UTC))
            snapshot = read_snapshot(engine, self.signer.key_id)
            missed = snapshot.unsequenced & seen
            if missed:
                return [
                    f"{e.describe()} is still without an index after a sequencer pass"
                    for e in snapshot.entries
                    if e.entry_id in missed
                ], snapshot
            latest = snapshot.checkpoints[-1].size if snapshot.checkpoints else 0
            if not snapshot.unsequenced and latest == len(snapshot.sequenced):
                return [], snapshot
            seen = snapshot.unsequenced
        return [
            f"still {len(snapshot.unsequenced)} entries without an index, or leaves beyond the "
            f"latest checkpoint, after {PUBLISH_ATTEMPTS} sequencer passes"
        ], snapshot

    def _checkpoint_failures(
        self, store: OrchestratorStore, snapshot: Snapshot, roots: dict[int, bytes]
    ) -> tuple[list[str], int]:
        """Open the checkpoints, compare them with the roots recomputed, verify the store's proofs; return the
        failures and the number of proofs verified."""
        verifier = NoteVerifier.from_vkey(self.signer.vkey)
        failures: list[str] = []
        opened: list[Checkpoint] = []
        for published in snapshot.checkpoints:
            try:
                checkpoint = open_checkpoint(published.signed_note, [verifier], origin=self.signer.origin)
            except TransparencyError as error:
                failures.append(f"the checkpoint of size {published.size} does not open: {error!r}")
                continue
            if (checkpoint.size, checkpoint.root_hash) != (published.size, published.root_hash):
                failures.append(f"the checkpoint stored at size {published.size} signs another size or root")
            opened.append(checkpoint)
        sequenced = snapshot.sequenced
        if not opened:
            return failures + ([f"{len(sequenced)} leaves, but no signed checkpoint"] if sequenced else []), 0
        latest = opened[-1]
        if latest.size != len(sequenced):
            failures.append(f"the latest checkpoint covers {latest.size} leaves of {len(sequenced)}")
        for checkpoint in opened:
            if roots.get(checkpoint.size) != checkpoint.root_hash:
                failures.append(
                    f"the checkpoint of size {checkpoint.size} is not the root of the first {checkpoint.size} leaves"
                )
        earlier = [c for c in opened[:-1] if 0 < c.size < latest.size]
        if self.kept is not None:
            if self.kept.size > latest.size:
                failures.append(
                    f"the latest checkpoint ({latest.size}) is smaller than one seen before ({self.kept.size})"
                )
            elif self.kept.size < latest.size:
                if self.kept not in earlier:
                    earlier.append(self.kept)
            elif self.kept.root_hash != latest.root_hash:
                failures.append(f"the checkpoint of size {latest.size} has another root than when seen before")
        proofs = 0
        for old in earlier:
            try:
                proof = store.consistency_proof(old.size, latest.size)
                verify_consistency(old.size, latest.size, proof, old.root_hash, latest.root_hash)
            except TransparencyError as error:
                failures.append(f"no consistency from the checkpoint of size {old.size} to {latest.size}: {error!r}")
            proofs += 1
        proved_from = self.proved if self.kept is not None and self.kept.size <= latest.size else 0
        for entry in _spread(sequenced[proved_from : latest.size], PROOF_SAMPLE):
            index = entry.leaf_index or 0
            try:
                proof = store.inclusion_proof(index, latest.size)
                verify_inclusion(index, latest.size, leaf_hash(entry.data), proof, latest.root_hash)
            except TransparencyError as error:
                failures.append(
                    f"{entry.describe()} is not included in the checkpoint of size {latest.size}: {error!r}"
                )
            proofs += 1
        if not failures:
            self.kept, self.proved = latest, latest.size
        return failures, proofs


def _tree_failures(snapshot: Snapshot) -> tuple[dict[int, bytes], list[str]]:
    """Recompute the tree from the leaves' bytes: return its root at every size, and the stored subtree hashes
    that are not their leaves', missing or beyond the leaves."""
    failures: list[str] = []
    roots: dict[int, bytes] = {}
    recomputed: dict[tuple[int, int], bytes] = {}
    tree = CompactRange()
    for entry in snapshot.sequenced:
        tree, completed = tree.append(leaf_hash(entry.data))
        recomputed.update(((node.level, node.index), node.hash) for node in completed)
        roots[tree.size] = tree.root()
    wrong = sorted(at for at, hash in recomputed.items() if snapshot.nodes.get(at, hash) != hash)
    missing = sorted(recomputed.keys() - snapshot.nodes.keys())
    extra = sorted(snapshot.nodes.keys() - recomputed.keys())
    for what, nodes in (("wrong", wrong), ("missing", missing), ("beyond the leaves", extra)):
        if nodes:
            shown = ", ".join(f"level {level} index {index}" for level, index in nodes[:10])
            failures.append(f"{len(nodes)} stored subtree hashes {what}: {shown}{' …' if len(nodes) > 10 else ''}")
    return roots, failures


def _spread(entries: list[Entry], most: int) -> list[Entry]:
    """At most most of entries, evenly spread, the first and the last among them."""
    if len(entries) <= most:
        return entries
    step = (len(entries) - 1) / (most - 1)
    return [entries[round(k * step)] for k in range(most)]


def _entry_failures(sequenced: list[Entry]) -> tuple[dict[int, Leaf], list[str]]:
    """Decode each entry; check its bytes, hash, columns and the indices. Return the leaves that decoded."""
    failures: list[str] = []
    leaves: dict[int, Leaf] = {}
    holders: dict[int, list[int]] = {}
    for entry in sequenced:
        index = entry.leaf_index or 0
        holders.setdefault(index, []).append(entry.entry_id)
        if entry.stored_hash != leaf_hash(entry.data):
            failures.append(f"{entry.describe()}: its stored hash is not its leaf hash")
        try:
            leaf = decode_leaf(entry.data)
        except TransparencyError as error:
            failures.append(f"{entry.describe()}: does not decode: {error}")
            continue
        if encode_leaf(leaf) != entry.data:
            failures.append(f"{entry.describe()}: its bytes are not the canonical encoding of their leaf")
        kind = _kind(leaf)
        if (kind, str(leaf.operation_id)) != (entry.kind, entry.operation_id):
            failures.append(f"{entry.describe()}: the leaf is a {kind} of {leaf.operation_id}")
        leaves[index] = leaf
    for index, entry_ids in sorted(holders.items()):
        if len(entry_ids) > 1:
            failures.append(f"leaf {index} is held by {len(entry_ids)} entries ({entry_ids})")
    size = max(holders, default=-1) + 1
    gaps = [index for index in range(size) if index not in holders]
    if gaps:
        failures.append(f"no leaf at indices {gaps[:20]}{' …' if len(gaps) > 20 else ''} of 0 … {size - 1}")
    return leaves, failures


def _history_failures(sequenced: Iterable[Entry]) -> list[str]:
    """Read the leaves in index order as an auditor does (transparency.History)."""
    history, failures = History(), []
    for entry in sequenced:
        try:
            history.read(entry.leaf_index or 0, entry.data)
        except HistoryError as error:
            failures.append(f"{error} ({entry.kind} of {entry.operation_id})")
    return failures


def _table_failures(snapshot: Snapshot, leaves: dict[int, Leaf]) -> list[str]:
    """Exactly one decision leaf per recorded decision, matching it; a proposal leaf per proposal row."""
    failures: list[str] = []
    decided: dict[str, list[tuple[int, DecisionLeaf]]] = {}
    proposed: dict[str, int] = {}
    for index, leaf in sorted(leaves.items()):
        if isinstance(leaf, DecisionLeaf):
            decided.setdefault(str(leaf.operation_id), []).append((index, leaf))
        elif isinstance(leaf, ProposalLeaf):
            proposed.setdefault(str(leaf.operation_id), index)
    for op, row in sorted(snapshot.decisions.items()):
        logged = decided.get(op, [])
        if not logged:
            failures.append(
                f"{op}: {row.decision} by {row.reviewer} is recorded, but no decision leaf of it is in the log"
            )
            continue
        if len(logged) > 1:
            failures.append(f"{op}: {len(logged)} decision leaves (leaves {[index for index, _ in logged]})")
        index, leaf = logged[0]
        said = (leaf.decision, leaf.principal, _utc(leaf.recorded_at))
        if said != (row.decision, row.reviewer, row.decided_at):
            failures.append(
                f"leaf {index} ({op}): {said[0]} by {said[1]} at {said[2].isoformat()}, but the decisions table "
                f"records {row.decision} by {row.reviewer} at {row.decided_at.isoformat()}"
            )
    for op, logged in sorted(decided.items()):
        if op not in snapshot.decisions:
            failures.append(f"leaf {logged[0][0]} ({op}): a decision leaf of an operation with no recorded decision")
    for op in sorted(snapshot.proposals - proposed.keys()):
        failures.append(f"{op}: a proposal is recorded, but no proposal leaf of it is in the log")
    for op, index in sorted(proposed.items()):
        if op not in snapshot.proposals:
            failures.append(f"leaf {index} ({op}): a proposal leaf of an operation the proposals table does not hold")
    return failures


def _outcome_failures(snapshot: Snapshot, leaves: dict[int, Leaf]) -> list[str]:
    """Exactly one outcome leaf per operation in a state of OUTCOME_KINDS, saying what its row holds; none of an
    operation in another state."""
    failures: list[str] = []
    logged: dict[str, list[tuple[int, OutcomeLeaf]]] = {}
    for index, leaf in sorted(leaves.items()):
        if isinstance(leaf, EffectLeaf | SettlementLeaf | RejectionLeaf | ExpiryLeaf):
            logged.setdefault(str(leaf.operation_id), []).append((index, leaf))
    for op, row in sorted(snapshot.outcomes.items()):
        kinds = OUTCOME_KINDS[row.state]
        found = logged.get(op, [])
        if len(found) != 1:
            failures.append(
                f"{op}: {row.state.value} in the operations table, with {len(found)} outcome leaves "
                f"(leaves {[index for index, _ in found]}) where one {' or '.join(kinds)} leaf belongs"
            )
            continue
        index, leaf = found[0]
        said, stored = _outcome_said(leaf), _outcome_stored(row)
        if _kind(leaf) not in kinds or said != stored:
            failures.append(f"leaf {index} ({op}): {_kind(leaf)} {said}, but the operations table holds {stored}")
    for op, found in sorted(logged.items()):
        if op not in snapshot.outcomes:
            failures.append(
                f"leaf {found[0][0]} ({op}): a {_kind(found[0][1])} leaf of an operation not in a state it records"
            )
    return failures


def _kind(leaf: Leaf) -> str:
    return type(leaf).__name__.removesuffix("Leaf").lower()


def _outcome_said(leaf: OutcomeLeaf) -> str:
    """What an outcome leaf says, in the words of _outcome_stored."""
    if isinstance(leaf, EffectLeaf):
        return _outcome(OperationState.COMMITTED.value, leaf.recorded_at, leaf.receipt_id, leaf.applied_at)
    if isinstance(leaf, SettlementLeaf):
        return _outcome(leaf.state, leaf.recorded_at, leaf.receipt_id, leaf.applied_at)
    if isinstance(leaf, RejectionLeaf):
        return f"{_outcome(OperationState.REJECTED.value, leaf.recorded_at)}: {leaf.reason!r}"
    return _outcome(OperationState.EXPIRED.value, leaf.recorded_at)


def _outcome_stored(row: RecordedOutcome) -> str:
    """What an operations row says a leaf of its outcome must say."""
    if row.state is OperationState.COMMITTED:
        return _outcome(row.state.value, row.changed_at, row.receipt_id, row.applied_at)
    if row.state is OperationState.REJECTED:
        return f"{_outcome(row.state.value, row.changed_at)}: {row.rejection_reason!r}"
    return _outcome(row.state.value, row.changed_at)


def _outcome(state: str, at: datetime, receipt_id: str | None = None, applied_at: datetime | None = None) -> str:
    said = f"{state} at {_utc(at).isoformat()}"
    if state == OperationState.COMMITTED.value:
        applied = "at no time" if applied_at is None else f"at {_utc(applied_at).isoformat()}"
        said += f" with receipt {receipt_id!r} applied {applied}"
    return said
