"""The TypeScript client's event feed under Node against a real orchestrator and receiver: watchEvents
keeps its cursor (every event once, in index order, across a restart or a crash of the orchestrator) and
waitForOutcome answers the settled operation, or times out with the last answer."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import grpc
import pytest

from decisionflow.v1 import common_pb2, review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import free_port
from tests.metrics.scrape import scrape
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, start_request
from tests.support.typescript import TypeScriptPackage

WAIT_SCRIPT = """
import { OperationState, WaitTimedOut, codeName, eventsClient, refusalOf, reviewClient, waitForOutcome }
  from "./dist/src/index.js";
const [target, operationId, timeoutMs] = process.argv.slice(1);
try {
  const operation = await waitForOutcome(reviewClient(target), eventsClient(target), operationId, Number(timeoutMs));
  console.log(JSON.stringify({ operationId: operation.operationId, state: OperationState[operation.state],
    receipt: operation.receipt?.receiptId ?? null }));
} catch (error) {
  if (!(error instanceof WaitTimedOut)) throw error;
  console.log(JSON.stringify({ error: error.name, operationId: error.operation.operationId,
    state: OperationState[error.operation.state], timeoutMs: error.timeoutMs,
    cause: codeName(refusalOf(error.cause).code) }));
}
"""

WATCH_SCRIPT = """
import { EventKind, eventsClient, watchEvents } from "./dist/src/index.js";
const [target, operationId] = process.argv.slice(1);
const events = eventsClient(target);
const seen = [];
for await (const item of watchEvents(events, { startIndex: 0, heartbeats: true })) {
  if (item.case === "heartbeat") { seen.push(["HEARTBEAT", Number(item.value.nextIndex)]); continue; }
  seen.push([EventKind[item.value.kind], Number(item.value.index), item.value.operationId === operationId]);
  if (item.value.kind === EventKind.EFFECT) break;
}
const effects = [];
for await (const item of watchEvents(events, { operationId, kinds: [EventKind.EFFECT] })) {
  effects.push([EventKind[item.value.kind], Number(item.value.index)]);
  break;
}
console.log(JSON.stringify({ seen, effects }));
"""

# Prints each event on its own line as it comes; gives up (exit 3) if the second effect never does.
RESUME_SCRIPT = """
import { EventKind, eventsClient, watchEvents } from "./dist/src/index.js";
setTimeout(() => process.exit(3), 90_000).unref();
let effects = 0;
for await (const item of watchEvents(eventsClient(process.argv[1]), { startIndex: 0 })) {
  console.log(JSON.stringify([EventKind[item.value.kind], Number(item.value.index)]));
  if (item.value.kind === EventKind.EFFECT && ++effects === 2) break;
}
"""


def _node(package: TypeScriptPackage, script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [package.node, "--input-type=module", "-e", script, *args],
        cwd=package.folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_a_stream(metrics_port: int, node: subprocess.Popen[str], budget: float = 60) -> None:
    """Return once the orchestrator counts a WatchEvents stream open (node's wait is watching)."""
    deadline = time.monotonic() + budget
    while scrape(metrics_port).value("decisionflow_event_streams") < 1:
        if node.poll() is not None:
            _, err = node.communicate()
            pytest.fail(f"node ended before it watched: {err}")
        assert time.monotonic() < deadline, "no WatchEvents stream opened"
        time.sleep(0.05)


def _start_and_approve(target: str, case_id: str) -> None:
    with grpc.insecure_channel(target) as channel:
        review = review_pb2_grpc.ReviewServiceStub(channel)
        op = review.StartReview(start_request(case_id=case_id), timeout=15).proposal.operation_id
        assert review.Approve(approve(op), timeout=15).outcome == common_pb2.OUTCOME_COMMITTED


def _line(stdout: IO[str]) -> list[object]:
    line = stdout.readline()
    assert line, "node ended before the line"
    parsed: list[object] = json.loads(line)
    return parsed


@pytest.mark.slow
def test_wait_for_outcome_answers_the_committed_operation_once_it_is_approved(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack]
) -> None:
    stack = make_stack(metrics_port=0)
    review = stack.review()
    op = review.StartReview(start_request(), timeout=15).proposal.operation_id
    target = f"127.0.0.1:{stack.orchestrator_port}"
    node = _node(typescript_package, WAIT_SCRIPT, target, op, "60000")
    try:
        _wait_for_a_stream(stack.servers[-1].metrics_port or 0, node)
        answer = review.Approve(approve(op), timeout=15)
        out, err = node.communicate(timeout=60)
    finally:
        node.kill()

    assert answer.outcome == common_pb2.OUTCOME_COMMITTED
    assert node.returncode == 0, err
    told = json.loads(out)
    assert (told["operationId"], told["state"]) == (op, "COMMITTED")
    assert told["receipt"] == answer.operation.receipt.receipt_id != ""


@pytest.mark.slow
def test_watch_events_from_index_0_sees_the_proposal_decision_and_effect_in_order(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack]
) -> None:
    stack = make_stack()
    review = stack.review()
    op = review.StartReview(start_request(), timeout=15).proposal.operation_id
    assert review.Approve(approve(op), timeout=15).outcome == common_pb2.OUTCOME_COMMITTED

    done = typescript_package.run(
        "--input-type=module", "-e", WATCH_SCRIPT, f"127.0.0.1:{stack.orchestrator_port}", op, timeout=60
    )

    assert done.returncode == 0, done.stderr
    told = json.loads(done.stdout)
    # The first message is the heartbeat at the start index; then every leaf from it, with no gap.
    assert told["seen"] == [["HEARTBEAT", 0], ["PROPOSAL", 0, True], ["DECISION", 1, True], ["EFFECT", 2, True]]
    assert told["effects"] == [["EFFECT", 2]]  # filtered by operation and kind


@pytest.mark.slow
def test_wait_for_outcome_times_out_with_the_last_answer(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack]
) -> None:
    stack = make_stack()
    op = stack.review().StartReview(start_request(), timeout=15).proposal.operation_id

    done = typescript_package.run(
        "--input-type=module", "-e", WAIT_SCRIPT, f"127.0.0.1:{stack.orchestrator_port}", op, "1500", timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "error": "WaitTimedOut",
        "operationId": op,
        "state": "PENDING_REVIEW",
        "timeoutMs": 1500,
        "cause": "CANCELLED",  # the wait's own timer ended the stream
    }
    assert stack.effects() == 0


@pytest.mark.slow
def test_watch_events_resumes_from_its_cursor_across_an_orchestrator_restart(
    typescript_package: TypeScriptPackage, make_stack: Callable[..., Stack]
) -> None:
    stack = make_stack()
    port = stack.orchestrator_port
    first = stack.review().StartReview(start_request(case_id="T-1"), timeout=15).proposal.operation_id
    assert stack.review().Approve(approve(first), timeout=15).outcome == common_pb2.OUTCOME_COMMITTED
    node = _node(typescript_package, RESUME_SCRIPT, f"127.0.0.1:{port}")
    try:
        assert node.stdout is not None
        before = [_line(node.stdout) for _ in range(3)]
        stack.stop_orchestrator()  # the stream breaks; node reconnects, refused until the restart
        stack.start_orchestrator(address=f"127.0.0.1:{port}")
        review = stack.review()
        second = review.StartReview(start_request(case_id="T-2"), timeout=15).proposal.operation_id
        assert review.Approve(approve(second), timeout=15).outcome == common_pb2.OUTCOME_COMMITTED
        out, err = node.communicate(timeout=90)
    finally:
        node.kill()

    assert node.returncode == 0, err
    after = [json.loads(line) for line in out.splitlines()]
    assert before + after == [
        ["PROPOSAL", 0], ["DECISION", 1], ["EFFECT", 2], ["PROPOSAL", 3], ["DECISION", 4], ["EFFECT", 5]
    ]  # fmt: skip


@pytest.mark.slow
def test_watch_events_resumes_from_its_cursor_after_the_orchestrator_process_is_killed(
    typescript_package: TypeScriptPackage, tmp_path: Path
) -> None:
    # Node's HTTP/2 transport hears a server killed mid-stream as CANCELLED or ABORTED, not UNAVAILABLE: the
    # watch resumes after those too, as the caller did not ask for them.
    address = f"127.0.0.1:{free_port()}"
    stack = ProcessStack(
        tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orch.db'}", CHECKPOINT_KEY
    )
    node: subprocess.Popen[str] | None = None
    try:
        stack.start_receiver()
        killed = stack.start_orchestrator("killed", args=["--address", address])
        _start_and_approve(address, "T-1")
        node = _node(typescript_package, RESUME_SCRIPT, address)
        assert node.stdout is not None
        before = [_line(node.stdout) for _ in range(3)]
        assert killed.kill() == -9
        stack.start_orchestrator("restarted", args=["--address", address])
        _start_and_approve(address, "T-2")
        out, err = node.communicate(timeout=90)
    finally:
        if node is not None:
            node.kill()
        stack.close()

    assert node.returncode == 0, err
    after = [json.loads(line) for line in out.splitlines()]
    assert before + after == [
        ["PROPOSAL", 0], ["DECISION", 1], ["EFFECT", 2], ["PROPOSAL", 3], ["DECISION", 4], ["EFFECT", 5]
    ]  # fmt: skip
