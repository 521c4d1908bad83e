"""What a real orchestrator and receiver write to stderr: access lines at the level of their code, the
start-up warning for checkpoints no key opens, retry lines naming the operation, and no trace ids
when tracing is off. Also what the review CLI advises after DATA_LOSS."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2, review_pb2, review_pb2_grpc
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    ProcessStack,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import ServiceProcess, spawn
from tests.support.cli import ROOT
from tests.support.logs import read_log
from tests.support.reply_cutter import ReplyCutter
from tests.support.stack import CHECKPOINT_KEY, approve, count, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

APPROVE = "/decisionflow.v1.ReviewService/Approve"
START = "/decisionflow.v1.ReviewService/StartReview"
GET_OPERATION = "/decisionflow.v1.ReviewService/GetOperation"
OTHER_KEY = "m" * 32
UNKNOWN_OPERATION = "op-v1-" + "0" * 64


def _log(process: ServiceProcess) -> list[dict[str, object]]:
    return [json.loads(line) for line in process.stderr().splitlines() if line.startswith("{")]


def _access(log: list[dict[str, object]], rpc: str, code: str) -> dict[str, object]:
    lines = [e for e in log if e["logger"] == "decisionflow.access" and e["rpc"] == rpc and e["code"] == code]
    assert len(lines) == 1, f"one access line for {rpc} {code} expected in {log}"
    return lines[0]


@pytest.fixture(autouse=True)
def _tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)


def test_access_lines_key_warning_and_data_loss_advice(tmp_path: Path) -> None:
    stack = ProcessStack(
        tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orch.db'}", CHECKPOINT_KEY
    )
    try:
        stack.start_receiver()
        first = stack.start_orchestrator("orchestrator-a")
        with grpc.insecure_channel(first.target) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            begun = review.StartReview(start_request(), timeout=15)
            operation_id, pending_checkpoint = begun.proposal.operation_id, begun.pending_review.checkpoint_id
            with pytest.raises(grpc.RpcError) as missing:
                review.GetOperation(review_pb2.GetOperationRequest(operation_id=UNKNOWN_OPERATION), timeout=5)
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND
        assert first.stop() == 0
        assert not any("cannot be resumed" in str(e["message"]) for e in _log(first))

        # The key that sealed the pending review is gone from the list: its checkpoint opens under no key.
        second = stack.start_orchestrator("orchestrator-b", env={CHECKPOINT_KEYS_ENV: OTHER_KEY})
        with grpc.insecure_channel(second.target) as channel, pytest.raises(grpc.RpcError) as lost:
            review_pb2_grpc.ReviewServiceStub(channel).Approve(approve(operation_id), timeout=15)
        assert lost.value.code() is grpc.StatusCode.DATA_LOSS
        cli = subprocess.run(
            [sys.executable, "-m", "decisionflow_cli", "approve", operation_id, "--target", second.target],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.stop() == 0
    finally:
        stack.close()

    before, after = _log(first), _log(second)
    started = _access(before, START, "OK")
    assert started["level"] == "info"
    assert started["operation_id"] == operation_id and started["case_id"] == "T-1042"
    assert isinstance(started["duration_ms"], float) and "principal" not in started  # no authentication here
    refused = _access(before, GET_OPERATION, "NOT_FOUND")
    assert refused["level"] == "warning" and refused["operation_id"] == UNKNOWN_OPERATION

    warnings = [e for e in after if "cannot be resumed" in str(e["message"])]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning"
    assert str(warnings[0]["message"]).startswith("1 pending review(s)")
    assert "checkpoint key list" in str(warnings[0]["message"]) and warnings[0]["operation_id"] == operation_id
    data_loss = [
        e for e in after if e["logger"] == "decisionflow.access" and e["rpc"] == APPROVE and e["code"] == "DATA_LOSS"
    ]
    assert len(data_loss) == 2 and {e["level"] for e in data_loss} == {"error"}  # the test's call and the CLI's
    assert data_loss[0]["operation_id"] == operation_id
    # The refusal says why, and names the checkpoint an operator must look at.
    assert data_loss[0]["reason"] == "CHECKPOINT_INTEGRITY"
    assert data_loss[0]["checkpoint_id"] == pending_checkpoint
    assert "sealed under unknown key" in str(data_loss[0]["detail"]), data_loss[0]

    assert not [e for e in before + after if "trace_id" in e or "span_id" in e], "tracing is off: no trace ids"

    assert cli.returncode == 3, cli.stderr
    assert "repeating will not help" in cli.stderr and "repeat it" not in cli.stderr
    assert "an operator must restore the checkpoint key" in cli.stderr


def _unavailable(_request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.UNAVAILABLE, "receiver database unavailable")


@pytest.fixture
def unavailable_receiver() -> Iterator[str]:
    """The target of a receiver answering every Apply UNAVAILABLE, as one whose database is down does
    (a stand-in at the seam; the orchestrator's log is what is checked)."""
    server = grpc.server(ThreadPoolExecutor(4))
    service = effect_receiver_pb2.DESCRIPTOR.services_by_name["EffectReceiverService"].full_name
    apply = grpc.unary_unary_rpc_method_handler(_unavailable)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, {"Apply": apply})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_retry_lines_name_the_operation_while_the_receiver_is_unavailable(
    tmp_path: Path, unavailable_receiver: str
) -> None:
    orchestrator = spawn(
        ORCHESTRATOR_MODULE,
        orchestrator_args(f"sqlite:///{tmp_path / 'orch.db'}", unavailable_receiver),
        tmp_path,
        "orchestrator",
        env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
    )
    try:
        with grpc.insecure_channel(orchestrator.target) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            operation_id = review.StartReview(start_request(), timeout=15).proposal.operation_id
            result = review.Approve(approve(operation_id), timeout=3)
        assert result.outcome == common_pb2.OUTCOME_UNKNOWN
    finally:
        assert orchestrator.stop() == 0
    log = _log(orchestrator)
    retries = [e for e in log if str(e["message"]).startswith("retrying after")]
    assert retries, log
    for line in retries:
        assert line["operation_id"] == operation_id and line["case_id"] == "T-1042", line
        assert line["level"] == "info" and line["code"] == "UNAVAILABLE" and line["rpc"] == "Apply"
    assert [line["attempt"] for line in retries] == list(range(1, len(retries) + 1))
    # The receiver answered UNAVAILABLE through every retry: an error an operator must see, never a rejection,
    # and never "nothing written": UNAVAILABLE is also how a reply lost after a commit ends.
    [unknown] = [e for e in log if e["level"] == "error"]
    assert unknown["operation_id"] == operation_id and unknown["code"] == "UNAVAILABLE"
    assert unknown["outcome"] == "unknown"
    assert f"after {len(retries) + 1} attempt(s)" in str(unknown["message"])
    assert "the effect may have been written" in str(unknown["message"])


def test_a_reply_lost_after_the_receiver_committed_is_logged_as_what_is_known(tmp_path: Path) -> None:
    receiver = spawn(RECEIVER_MODULE, receiver_args(f"sqlite:///{tmp_path / 'receiver.db'}"), tmp_path, "receiver")
    cutter = ReplyCutter(receiver.port)
    try:
        orchestrator = spawn(
            ORCHESTRATOR_MODULE,
            orchestrator_args(f"sqlite:///{tmp_path / 'orch.db'}", cutter.target),
            tmp_path,
            "orchestrator",
            env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
        )
        try:
            with grpc.insecure_channel(orchestrator.target) as channel:
                review = review_pb2_grpc.ReviewServiceStub(channel)
                operation_id = review.StartReview(start_request(), timeout=15).proposal.operation_id
                result = review.Approve(approve(operation_id), timeout=15)
        finally:
            assert orchestrator.stop() == 0
    finally:
        cutter.close()
        assert receiver.stop() == 0

    # Every attempt reached the receiver, which wrote the effect once; every reply was lost.
    assert result.outcome == common_pb2.OUTCOME_UNKNOWN
    assert count(f"sqlite:///{tmp_path / 'receiver.db'}", "SELECT count(*) FROM effects") == 1
    assert cutter.replies_cut >= 2
    [line] = [e for e in _log(orchestrator) if e["level"] == "error"]
    message = str(line["message"])
    assert (line["operation_id"], line["code"], line["outcome"]) == (operation_id, "UNAVAILABLE", "unknown")
    assert "did not accept" not in message and "wrote nothing" not in message
    assert "the effect may have been written" in message
    assert "the outcome is Unknown until a lookup at the receiver settles it" in message


def _json_lines(text: str) -> list[dict[str, Any]]:
    log = read_log(text)
    log.assert_json_only()
    return log.records


def test_every_line_is_json_the_listening_line_and_the_frameworks_own_included(tmp_path: Path) -> None:
    orchestrator = spawn(
        ORCHESTRATOR_MODULE,
        orchestrator_args(
            f"sqlite:///{tmp_path / 'orch.db'}", "127.0.0.1:9", failpoints="orchestrator.checkpoint_save=raise"
        ),
        tmp_path,
        "orchestrator",
        env={CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY},
    )
    try:
        with grpc.insecure_channel(orchestrator.target) as channel, pytest.raises(grpc.RpcError) as refused:
            review_pb2_grpc.ReviewServiceStub(channel).StartReview(start_request(), timeout=15)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        assert orchestrator.stop() == 0
    (listening,) = _json_lines(orchestrator.stdout_path.read_text())
    assert (listening["event"], listening["service"], listening["port"]) == (
        "listening",
        "orchestrator",
        orchestrator.port,
    )
    assert listening["level"] == "info"
    log = _json_lines(orchestrator.stderr())
    # The framework's own line says the run goes on; the request was refused all the same (the access line).
    framework = [e for e in log if str(e["logger"]).startswith("agent_framework")]
    assert framework and {e["level"] for e in framework} == {"warning"}, framework
    assert all(str(e["message"]).startswith("Failed to create checkpoint") for e in framework)
    assert _access(log, START, "UNAVAILABLE")["reason"] == "CHECKPOINT_SAVE_FAILED"
