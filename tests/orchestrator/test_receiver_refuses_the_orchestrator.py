"""A receiver that refuses the orchestrator's own credentials refuses the caller, not the effect: the
approval is Unknown (never REJECTED), logged at error with the receiver's code, counted, and committed
once the credentials are fixed (real processes: a receiver, an orchestrator, the ops command)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc

from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import child_environment, free_port
from decisionflow_server.runtime.auth import Role, bearer_metadata, issue_token
from tests.metrics.scrape import scrape
from tests.support.secure import hang_up
from tests.support.stack import CHECKPOINT_KEY, approve, count, start_request

ROOT = Path(__file__).resolve().parents[2]
ERRORS = "decisionflow_receiver_call_errors_total"
LAST_REFUSAL = "decisionflow_receiver_last_refusal_timestamp_seconds"
LAST_APPLIED = "decisionflow_receiver_last_applied_timestamp_seconds"


def _log_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_receiver_refusing_the_orchestrators_token_leaves_the_approval_unknown_until_it_is_fixed(
    tmp_path: Path,
) -> None:
    receiver_credentials = tmp_path / "receiver-credentials.json"
    writer_token = tmp_path / "walter.token"
    writer_token.write_text(issue_token(receiver_credentials, "walter", [Role.EFFECT_WRITER]) + "\n")
    writer_token.chmod(0o600)
    with_writer = receiver_credentials.read_text(encoding="utf-8")
    # The receiver's credentials lack the orchestrator's token (a rotation gone wrong).
    receiver_credentials.unlink()
    issue_token(receiver_credentials, "edna", [Role.EFFECT_READER])
    orchestrator_credentials = tmp_path / "orchestrator-credentials.json"
    tokens = {
        name: issue_token(orchestrator_credentials, name, [role])
        for name, role in (("ava", Role.AUTHOR), ("rita", Role.REVIEWER), ("olga", Role.OPERATOR))
    }
    operator_token = tmp_path / "olga.token"
    operator_token.write_text(tokens["olga"] + "\n")
    operator_token.chmod(0o600)
    metrics_port = free_port()
    stack = ProcessStack(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", f"sqlite:///{tmp_path / 'o.db'}", CHECKPOINT_KEY)
    try:
        receiver = stack.start_receiver(args=["--credentials-file", str(receiver_credentials)])
        orchestrator = stack.start_orchestrator(
            args=[
                *("--credentials-file", str(orchestrator_credentials)),
                *("--receiver-token-file", str(writer_token)),
                *("--metrics-port", str(metrics_port)),
            ]
        )
        with grpc.insecure_channel(orchestrator.target) as channel:
            review = review_pb2_grpc.ReviewServiceStub(channel)
            started = review.StartReview(start_request(), timeout=10, metadata=bearer_metadata(tokens["ava"]))
            op = started.proposal.operation_id

            answer = review.Approve(approve(op), timeout=10, metadata=bearer_metadata(tokens["rita"]))
            state = review.GetOperation(
                review_pb2.GetOperationRequest(operation_id=op), timeout=5, metadata=bearer_metadata(tokens["rita"])
            ).operation.state

        assert answer.outcome == common_pb2.OUTCOME_UNKNOWN
        assert state == common_pb2.OPERATION_STATE_UNKNOWN
        lines = _log_lines(orchestrator.log())
        [refusal] = [line for line in lines if line["level"] == "error"]
        assert refusal["operation_id"] == op and refusal["code"] == "UNAUTHENTICATED"
        assert "UNAUTHENTICATED" in str(refusal["message"]) and op in str(refusal["message"])
        [access] = [line for line in lines if line.get("rpc") == "/decisionflow.v1.ReviewService/Approve"]
        assert access["level"] == "warning" and "OK outcome unknown" in str(access["message"])
        refused = scrape(metrics_port)
        assert refused.value(ERRORS, code="UNAUTHENTICATED") == 1
        # What the alert compares: a refusal noted, no Apply accepted since.
        assert refused.value(LAST_REFUSAL) > refused.value(LAST_APPLIED) == 0
        assert "refused the orchestrator itself before any work" in str(refusal["message"])
        assert count(stack.receiver_url, "SELECT count(*) FROM effects") == 0

        receiver_credentials.write_text(with_writer, encoding="utf-8")
        hang_up(receiver, "credentials reloaded", 0)
        as_operator = ["--target", orchestrator.target, "--token-file", str(operator_token)]
        redrive = subprocess.run(
            [sys.executable, "-m", "decisionflow_cli", "ops", "redrive", op, "--json", *as_operator],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=child_environment(),
        )

        assert redrive.returncode == 0, redrive.stderr
        assert json.loads(redrive.stdout)["outcome"] == "COMMITTED"
        assert count(stack.receiver_url, "SELECT count(*) FROM effects") == 1
        accepted = scrape(metrics_port)
        assert accepted.value(LAST_APPLIED) >= accepted.value(LAST_REFUSAL) == refused.value(LAST_REFUSAL)
    finally:
        stack.close()
