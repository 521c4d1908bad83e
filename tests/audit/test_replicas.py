"""Two orchestrator processes on one PostgreSQL database, deciding at 16 calls in flight while both run
the sequencer every 0.2 s: every decision has exactly one leaf, the indices are 0..n-1 without a gap,
every checkpoint either published is consistent with every earlier one, and every leaf's inclusion
proof verifies against the latest (checked as an auditor would, with the verifier key alone)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from decisionflow.transparency import DecisionLeaf, EffectLeaf, NoteSigner, ProposalLeaf, decode_leaf
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_server.foundation.processes import ServiceProcess
from decisionflow_server.storage import db
from orchestrator.audit.sequencer import publish
from orchestrator.audit_log.signing import DEFAULT_ORIGIN, CheckpointSigner, write_new_key
from orchestrator.schema import audit_checkpoints, audit_entries, decisions, operations
from orchestrator.store import OrchestratorStore
from tests.support.audit import check_log
from tests.support.stack import approve, decline, spawn_orchestrator, spawn_receiver, start_request

IN_FLIGHT = 16
OPERATIONS = 96


def _decide(stubs: list[review_pb2_grpc.ReviewServiceStub], ops: list[str]) -> list[review_pb2.ApproveResponse]:
    """Every third operation declined, the others approved twice at once, once through each process."""
    calls = []
    for n, op in enumerate(ops):
        if n % 3 == 0:
            calls.append((stubs[n % 2], decline(op)))
        else:
            calls += [(stubs[0], approve(op)), (stubs[1], approve(op))]
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        futures = [pool.submit(stub.Approve, request, timeout=60) for stub, request in calls]
        return [future.result() for future in futures]


@pytest.mark.postgres
@pytest.mark.slow
def test_two_replicas_deciding_at_sixteen_in_flight_keep_one_gapless_consistent_log(
    tmp_path: Path, postgres_url: str
) -> None:
    key_file = tmp_path / "audit.key"
    vkey = write_new_key(key_file, DEFAULT_ORIGIN).verifier().vkey
    audit = ["--audit-signing-key-file", str(key_file), "--audit-interval-seconds", "0.2"]
    receiver = spawn_receiver(tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}")
    replicas: list[ServiceProcess] = []
    channels: list[grpc.Channel] = []
    try:
        replicas = [
            spawn_orchestrator(tmp_path, postgres_url, receiver, f"orchestrator-{n}", extra=audit) for n in (1, 2)
        ]
        channels = [grpc.insecure_channel(p.target) for p in replicas]
        stubs = [review_pb2_grpc.ReviewServiceStub(c) for c in channels]
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            started = pool.map(
                lambda n: stubs[n % 2].StartReview(start_request(case_id=f"T-{n}"), timeout=60), range(OPERATIONS)
            )
            ops = [answer.proposal.operation_id for answer in started]
        answers = _decide(stubs, ops)
        assert Counter(a.outcome for a in answers) == {
            common_pb2.OUTCOME_COMMITTED: 2 * (OPERATIONS - OPERATIONS // 3),
            common_pb2.OUTCOME_DECLINED: OPERATIONS // 3,
        }
        for process in replicas:
            assert process.stop() == 0
            assert "sequencing the audit log failed" not in process.stderr_path.read_text()
    finally:
        for channel in channels:
            channel.close()
        for process in replicas:
            process.kill()
        receiver.stop()

    engine = db.create_engine(postgres_url)
    try:
        store = OrchestratorStore(engine)
        # What the replicas left unsequenced at their stop, sequenced and signed as audit-checkpoint would.
        signer = CheckpointSigner(DEFAULT_ORIGIN, NoteSigner.from_skey(key_file.read_text().strip()))
        publish(store, signer, lambda: datetime.now(UTC))
        with engine.connect() as conn:
            decided = {row.operation_id: row for row in conn.execute(sa.select(decisions))}
            committed = set(
                conn.execute(sa.select(operations.c.operation_id).where(operations.c.state == "committed")).scalars()
            )
            indices = sorted(conn.execute(sa.select(audit_entries.c.leaf_index)).scalars())
            sizes = sorted(set(conn.execute(sa.select(audit_checkpoints.c.size)).scalars()))
        entries = OPERATIONS + len(decided) + len(committed)
        assert indices == list(range(entries))  # every entry sequenced, 0..n-1, no gap

        logged = [decode_leaf(leaf.data) for leaf in store.leaves(0, entries + 1)]
        decision_leaves = [leaf for leaf in logged if isinstance(leaf, DecisionLeaf)]
        assert sorted(leaf.operation_id for leaf in decision_leaves) == sorted(decided) == sorted(ops)
        for leaf in decision_leaves:
            row = decided[leaf.operation_id]
            assert (leaf.decision, leaf.principal, leaf.recorded_at) == (
                row.decision.upper(),
                row.reviewer,
                row.decided_at,
            )
        assert sorted(leaf.operation_id for leaf in logged if isinstance(leaf, ProposalLeaf)) == sorted(ops)
        assert sorted(leaf.operation_id for leaf in logged if isinstance(leaf, EffectLeaf)) == sorted(committed)
        for op in ops:
            assert len(store.leaf_indices(operation_id=op)) == (3 if op in committed else 2)

        # Both replicas signed while the load ran: many sizes, each checked against every earlier one.
        assert len(sizes) >= 3, sizes
        published = [store.checkpoint(size) for size in sizes]
        checkpoints = [c for c in published if c is not None]
        assert check_log(store, checkpoints, vkey, DEFAULT_ORIGIN) == sizes[-1] == entries
    finally:
        engine.dispose()
