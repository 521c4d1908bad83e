"""The fields and levels of log lines, the retry lines' context and the CLI's advice, without processes."""

from __future__ import annotations

import json
import logging

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from decisionflow import reasons
from decisionflow.client.errors import CheckpointIntegrity, error_class
from decisionflow.retry import RetryPolicy, retrying
from decisionflow_cli.review._output import advice, failed
from decisionflow_server.foundation.logs import JsonFormatter
from decisionflow_server.runtime.access import access_level

QUICK = RetryPolicy(
    "test_quick", max_attempts=3, max_total_seconds=60.0, initial_backoff=0.01, max_backoff=0.01, multiplier=1.0
)


class Unavailable(grpc.RpcError):
    """A failed call as grpc raises it."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


def _format(message: str, **extra: object) -> dict[str, object]:
    record = logging.LogRecord("decisionflow.test", logging.INFO, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return dict(json.loads(JsonFormatter().format(record)))


def test_a_line_inside_a_span_carries_its_trace_and_span_ids() -> None:
    # A provider of the test's own, never installed globally: the span is current only in this block.
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("call") as span:
        inside = _format("inside", operation_id="op-1", duration_ms=1.5)
    outside = _format("outside")
    context = span.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}" and inside["span_id"] == f"{context.span_id:016x}"
    assert inside["operation_id"] == "op-1" and inside["duration_ms"] == 1.5
    assert "trace_id" not in outside and "span_id" not in outside


@pytest.mark.parametrize(
    ("code", "level"),
    [
        (grpc.StatusCode.OK, logging.INFO),
        (grpc.StatusCode.INVALID_ARGUMENT, logging.WARNING),
        (grpc.StatusCode.NOT_FOUND, logging.WARNING),
        (grpc.StatusCode.ALREADY_EXISTS, logging.WARNING),
        (grpc.StatusCode.FAILED_PRECONDITION, logging.WARNING),
        (grpc.StatusCode.PERMISSION_DENIED, logging.WARNING),
        (grpc.StatusCode.UNAUTHENTICATED, logging.WARNING),
        (grpc.StatusCode.UNAVAILABLE, logging.WARNING),
        (grpc.StatusCode.DEADLINE_EXCEEDED, logging.WARNING),
        (grpc.StatusCode.DATA_LOSS, logging.ERROR),
        (grpc.StatusCode.INTERNAL, logging.ERROR),
        (grpc.StatusCode.UNKNOWN, logging.ERROR),
    ],
)
def test_access_level_follows_the_code(code: grpc.StatusCode, level: int) -> None:
    assert access_level("/decisionflow.v1.ReviewService/Approve", code) == level


def test_health_checks_are_logged_at_debug_whatever_their_code() -> None:
    assert access_level("/grpc.health.v1.Health/Check", grpc.StatusCode.OK) == logging.DEBUG
    assert access_level("/grpc.health.v1.Health/Check", grpc.StatusCode.NOT_FOUND) == logging.DEBUG


def test_each_retry_line_carries_the_callers_context(caplog: pytest.LogCaptureFixture) -> None:
    attempts = [0]

    def flaky() -> str:
        attempts[0] += 1
        if attempts[0] < 3:
            raise Unavailable()
        return "applied"

    caplog.set_level(logging.INFO, logger="decisionflow.retry")
    retrier = retrying(QUICK, sleep=lambda _: None, log_context={"operation_id": "op-7", "case_id": "C-7"})
    assert retrier(flaky) == "applied"
    lines = [r for r in caplog.records if r.name == "decisionflow.retry"]
    assert [(r.levelno, r.__dict__["attempt"]) for r in lines] == [(logging.INFO, 1), (logging.INFO, 2)]
    assert {(r.__dict__["operation_id"], r.__dict__["case_id"], r.__dict__["code"]) for r in lines} == {
        ("op-7", "C-7", "UNAVAILABLE")
    }


def test_data_loss_advice_says_who_must_act_and_never_to_repeat(capsys: pytest.CaptureFixture[str]) -> None:
    error = CheckpointIntegrity(
        grpc.StatusCode.DATA_LOSS, "HMAC does not match", reason=reasons.CHECKPOINT_INTEGRITY, metadata={}
    )
    ended = failed("approve", error, "op-1")
    capsys.readouterr()
    assert ended.exit_code == 3
    assert ended.reason.endswith(
        "the stored checkpoint fails its integrity check; an operator must restore the checkpoint key (or the "
        "altered row), else the review must be started again with an edited proposal; repeating will not help"
    )


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK])
def test_only_a_failure_that_may_have_acted_is_worth_repeating(code: grpc.StatusCode) -> None:
    error = error_class(code, "")(code, "detail")
    text = advice(error, "op-1")
    worth_repeating = code in {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
    }
    assert ("repeat it" in text) is worth_repeating, text
    if code in {grpc.StatusCode.DATA_LOSS, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}:
        assert "will not help" in text
