"""The attempt lease is bounded by the orchestrator's own attempt budget, never by the caller's
deadline, across real processes: an Approve sent with a 300 s deadline whose orchestrator dies right
after recording the decision holds the operation for the budget and a second, not for 300 s; `ops
describe` on the restarted orchestrator shows the dead holder and that expiry; once it has passed,
one reconciler pass settles the operation to one effect. A restarted orchestrator on the same host
takes over the lease of its dead predecessor at once (a replay commits within a deadline far shorter
than the lease), never the lease of a live one. And the store's contract for the holder, on SQLite
and PostgreSQL: recorded with the lease, replaced by the next holder, cleared with it, and taken over
only in the name of the ended holder."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow.vocabulary import OperationId, Receipt
from decisionflow_demo.launch import RECEIVER_MODULE, receiver_args
from decisionflow_server.foundation.processes import child_environment, spawn
from decisionflow_server.storage import db
from orchestrator.service._attempts import LEASE_MARGIN_SECONDS
from orchestrator.store import AttemptInFlight, OrchestratorStore, migrate
from tests.support.reconciling import run_reconciler
from tests.support.seeding import proposal_for, seed_decided
from tests.support.servers import ServiceProcess
from tests.support.stack import approve, count, spawn_orchestrator, spawn_receiver, start_request

# The orchestrators' attempt budget (--receiver-timeout-seconds): short, so the test waits little.
BUDGET_SECONDS = 2.0
CALLER_DEADLINE_SECONDS = 300.0
BUDGET_FLAGS = ("--receiver-timeout-seconds", str(BUDGET_SECONDS))


def _describe(orchestrator: ServiceProcess, op: str, *flags: str) -> str:
    """Run ``decisionflow ops describe`` as a separate process; return its stdout."""
    argv = [
        sys.executable,
        "-m",
        "decisionflow_cli",
        "ops",
        "describe",
        op,
        "--target",
        orchestrator.target,
        *flags,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, env=child_environment())
    assert done.returncode == 0, done.stderr
    return done.stdout


def _approval_that_crashes(
    tmp_path: Path,
    orchestrator_url: str,
    receiver: ServiceProcess,
    failpoint: str,
    flags: Sequence[str],
    deadline: float,
) -> tuple[ServiceProcess, str, datetime]:
    """Start an orchestrator that exits at failpoint, start a review and approve it until it dies; return the
    dead orchestrator, the operation id and when the Approve was sent."""
    crashing = spawn_orchestrator(
        tmp_path, orchestrator_url, receiver, "crashing", failpoints=f"{failpoint}=exit", extra=flags
    )
    with grpc.insecure_channel(crashing.target) as channel:
        review = review_pb2_grpc.ReviewServiceStub(channel)
        op = review.StartReview(start_request(), timeout=10).proposal.operation_id
        sent = datetime.now(UTC)
        with pytest.raises(grpc.RpcError):
            review.Approve(approve(op), timeout=deadline)
    assert crashing.process.wait(15) == 86  # the failpoint's exit status
    return crashing, op, sent


@pytest.mark.slow
def test_a_crashed_holder_pins_its_operation_for_the_budget_not_the_callers_deadline(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    receiver = spawn_receiver(tmp_path, receiver_url)
    try:
        crashing, op, sent = _approval_that_crashes(
            tmp_path, orchestrator_url, receiver, "orchestrator.after_decision", BUDGET_FLAGS, CALLER_DEADLINE_SECONDS
        )

        orchestrator = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "restarted", extra=BUDGET_FLAGS)
        try:
            described = json.loads(_describe(orchestrator, op, "--json"))
            lease = described["attempt_lease"]
            assert described["state"] == "UNKNOWN" and described["attempts"] == 1
            assert lease["holder"].split(":")[1] == str(crashing.process.pid)
            expires_at = datetime.fromisoformat(lease["expires_at"])
            decided_at = datetime.fromisoformat(described["decided_at"])
            # Within the service's budget and margin of the decision, nowhere near the caller's 300 s.
            assert (
                sent <= decided_at < expires_at <= decided_at + timedelta(seconds=BUDGET_SECONDS + LEASE_MARGIN_SECONDS)
            )
            assert described["lease_expires_in_seconds"] <= BUDGET_SECONDS + LEASE_MARGIN_SECONDS
            fields = dict(line.split(":", 1) for line in _describe(orchestrator, op).splitlines())
            assert fields["lease holder"].strip() == lease["holder"]
            assert fields["lease expires"].strip().startswith(expires_at.isoformat())

            time.sleep(max(0.0, (expires_at - datetime.now(UTC)).total_seconds()) + 0.1)
            run = run_reconciler(
                ["--once", "--json", "--grace-seconds", "0"],
                env={
                    "DECISIONFLOW_ORCHESTRATOR_TARGET": orchestrator.target,
                    "DECISIONFLOW_RECEIVER_TARGET": receiver.target,
                },
            )
            assert run.returncode == 0, run.stderr
            assert (run.summary["redriven"], run.summary["still_unknown"]) == (1, 0)
            assert run.summary["redrive_outcomes"]["committed"] == 1
            with grpc.insecure_channel(orchestrator.target) as channel:
                review = review_pb2_grpc.ReviewServiceStub(channel)
                settled = review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation
            assert settled.state == common_pb2.OPERATION_STATE_COMMITTED and not settled.HasField("attempt_lease")
            assert count(receiver_url, "SELECT count(*) FROM effects WHERE case_id = 'T-1042'") == 1
            assert json.loads(_describe(orchestrator, op, "--json"))["attempt_lease"] is None
        finally:
            assert orchestrator.stop() == 0
    finally:
        receiver.stop()


# A budget long enough that waiting out a lease could not fit in the replay's deadline, however long a loaded
# machine takes to crash the first orchestrator and start the second (60 s once left 19 s).
LONG_BUDGET_FLAGS = ("--receiver-timeout-seconds", "600")
REPLAY_DEADLINE_SECONDS = 20.0


def _operation(orchestrator: ServiceProcess, op: str) -> review_pb2.Operation:
    with grpc.insecure_channel(orchestrator.target) as channel:
        review = review_pb2_grpc.ReviewServiceStub(channel)
        return review.GetOperation(review_pb2.GetOperationRequest(operation_id=op), timeout=5).operation


@pytest.mark.slow
def test_a_restarted_orchestrator_takes_over_its_dead_predecessors_lease_at_once(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    receiver = spawn_receiver(tmp_path, receiver_url)
    try:
        # It dies holding the lease it recorded, and is reaped.
        crashing, op, _ = _approval_that_crashes(
            tmp_path, orchestrator_url, receiver, "orchestrator.after_attempt", LONG_BUDGET_FLAGS, 30
        )

        restarted = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "restarted", extra=LONG_BUDGET_FLAGS)
        try:
            held = json.loads(_describe(restarted, op, "--json"))
            dead_holder = held["attempt_lease"]["holder"]
            assert dead_holder.split(":")[1] == str(crashing.process.pid)
            # Waiting out this lease could not fit in the replay's deadline.
            assert held["lease_expires_in_seconds"] > REPLAY_DEADLINE_SECONDS
            assert count(receiver_url, "SELECT count(*) FROM effects") == 0

            with grpc.insecure_channel(restarted.target) as channel:
                review = review_pb2_grpc.ReviewServiceStub(channel)
                replayed = review.Approve(approve(op), timeout=REPLAY_DEADLINE_SECONDS)

            assert replayed.outcome == common_pb2.OUTCOME_COMMITTED and replayed.replay
            settled = _operation(restarted, op)
            assert settled.state == common_pb2.OPERATION_STATE_COMMITTED and settled.attempts == 2
            assert count(receiver_url, "SELECT count(*) FROM effects") == 1
            taken = [
                line
                for line in restarted.log().splitlines()
                if "taking over the attempt lease of " + dead_holder in line
            ]
            assert len(taken) == 1, restarted.log()
        finally:
            assert restarted.stop() == 0
    finally:
        receiver.stop()


@pytest.mark.slow
def test_a_live_orchestrators_lease_on_the_same_host_is_waited_for_never_taken(tmp_path: Path) -> None:
    receiver_url = f"sqlite:///{tmp_path / 'receiver.db'}"
    orchestrator_url = f"sqlite:///{tmp_path / 'orchestrator.db'}"
    # Every Apply commits, then its answer is held past the caller's deadline: an attempt in flight.
    receiver = spawn(RECEIVER_MODULE, [*receiver_args(receiver_url), "--faults", "delay=1"], tmp_path, "receiver")
    try:
        budget = ("--receiver-timeout-seconds", "8")
        first = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "first", extra=budget)
        second = spawn_orchestrator(tmp_path, orchestrator_url, receiver, "second", extra=budget)
        try:
            with grpc.insecure_channel(first.target) as channel, ThreadPoolExecutor(1) as pool:
                review = review_pb2_grpc.ReviewServiceStub(channel)
                op = review.StartReview(start_request(), timeout=10).proposal.operation_id
                approving = pool.submit(review.Approve, approve(op), timeout=30)
                while not (operation := _operation(second, op)).HasField("attempt_lease"):
                    assert not approving.done(), approving.result()
                    time.sleep(0.02)
                live_holder = operation.attempt_lease.holder
                assert live_holder.split(":")[1] == str(first.pid)

                with grpc.insecure_channel(second.target) as other:
                    replayed = review_pb2_grpc.ReviewServiceStub(other).Approve(approve(op), timeout=2)
                # The second waited for the live holder's attempt: no attempt of its own, the lease untouched.
                assert replayed.outcome == common_pb2.OUTCOME_UNKNOWN
                during = _operation(second, op)
                assert (during.attempts, during.attempt_lease.holder) == (1, live_holder)
                assert approving.result().outcome == common_pb2.OUTCOME_UNKNOWN
            assert "taking over" not in second.log()
        finally:
            assert second.stop() == 0 and first.stop() == 0
    finally:
        receiver.stop()
    assert count(receiver_url, "SELECT count(*) FROM effects") == 1


def test_the_store_records_who_holds_a_lease_and_clears_it_with_the_lease(database_url: str) -> None:
    engine = db.create_engine(database_url)
    try:
        migrate(engine)
        store = OrchestratorStore(engine)
        t0 = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
        seeded = seed_decided(store, proposal_for("L-1", "Lease me.", t0), t0)
        op, payload, digest = seeded.operation_id, seeded.payload, seeded.payload_digest

        held = store.record_attempt(op, payload, digest, t0, t0 + timedelta(seconds=6), holder="host-a:41:0a0b0c")
        assert (held.attempt_lease_holder, held.attempt_lease_until) == ("host-a:41:0a0b0c", t0 + timedelta(seconds=6))
        # host-a crashed; once its lease has passed, host-b takes the operation in its own name.
        taken = store.record_attempt(
            op, payload, digest, t0 + timedelta(seconds=7), t0 + timedelta(seconds=13), holder="host-b:7:1a2b3c"
        )
        assert taken.attempt_lease_holder == "host-b:7:1a2b3c"
        released = store.release_attempt(op, t0 + timedelta(seconds=13))
        assert (released.attempt_lease_holder, released.attempt_lease_until) == (None, None)

        # A lease is taken over in the name of the ended holder only, before it passes.
        store.record_attempt(op, payload, digest, t0 + timedelta(seconds=14), t0 + timedelta(seconds=20), holder="c")
        with pytest.raises(AttemptInFlight):
            store.record_attempt(
                op,
                payload,
                digest,
                t0 + timedelta(seconds=15),
                t0 + timedelta(seconds=21),
                holder="d",
                ended_holder="x",
            )
        over = store.record_attempt(
            op, payload, digest, t0 + timedelta(seconds=15), t0 + timedelta(seconds=21), holder="d", ended_holder="c"
        )
        assert (over.attempt_lease_holder, over.attempt_lease_until, over.attempts) == (
            "d",
            t0 + timedelta(seconds=21),
            held.attempts + 3,
        )
        with pytest.raises(AttemptInFlight):  # "c" no longer holds it: a second taker finds "d"
            store.record_attempt(
                op,
                payload,
                digest,
                t0 + timedelta(seconds=15),
                t0 + timedelta(seconds=22),
                holder="e",
                ended_holder="c",
            )
        committed = store.record_receipt(
            op, Receipt("rcpt-1", OperationId(op), t0 + timedelta(seconds=16)), t0 + timedelta(seconds=16)
        )
        assert (committed.attempt_lease_holder, committed.attempt_lease_until) == (None, None)
    finally:
        engine.dispose()
