"""Per-author budgets on StartReview and EditProposal, through real servers with authentication on: a
principal over its call rate or its content bytes is refused RESOURCE_EXHAUSTED with the delay to wait
(a RetryInfo), and is accepted once the delay has passed on the budgets' clock; an author with the most
open reviews allowed adds no more until one is decided, on SQLite and PostgreSQL, however many of its
calls race; other principals are never affected; nothing is written by a refusal; each refusal is
counted by reason."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info, retry_delay
from decisionflow.v1 import common_pb2, review_pb2
from orchestrator.main import _largest_content
from orchestrator.quotas import AuthorLimits
from orchestrator.validation import MAX_BODY_BYTES
from orchestrator.wire import start_from_pb
from tests.metrics.scrape import scrape
from tests.security.dbstate import snapshot
from tests.support.secure import SecureStack, start_secure_stack
from tests.support.stack import decline, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


class BudgetClock:
    """The monotonic clock the budgets refill by: it moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def secure_stacks(tmp_path: Path) -> Iterator[Callable[..., SecureStack]]:
    """Start secure stacks with OrchestratorConfig overrides (a metrics endpoint each); close them after."""
    started: list[SecureStack] = []

    def start(orchestrator_url: str | None = None, **overrides: Any) -> SecureStack:
        directory = tmp_path / f"stack-{len(started)}"
        directory.mkdir()
        secure = start_secure_stack(directory, orchestrator_url=orchestrator_url, metrics_port=0, **overrides)
        started.append(secure)
        return secure

    yield start
    for secure in started:
        secure.close()


def _start(secure: SecureStack, who: str, request: review_pb2.StartReviewRequest) -> review_pb2.StartReviewResponse:
    return secure.stack.review().StartReview(request, metadata=secure.as_(who), timeout=30)


def _edit(secure: SecureStack, who: str, expected: str, body: str) -> review_pb2.EditProposalResponse:
    original = start_request()
    request = review_pb2.EditProposalRequest(
        expected_operation_id=expected, body=body, evidence=original.evidence, policy=original.policy
    )
    return secure.stack.review().EditProposal(request, metadata=secure.as_(who), timeout=30)


def _refused(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value


def _refusals(secure: SecureStack) -> dict[str, float]:
    port = secure.stack.servers[-1].metrics_port
    assert port is not None
    seen = scrape(port)
    return {
        reason: seen.value("decisionflow_quota_refusals_total", reason=reason)
        for reason in (reasons.CALL_RATE_EXCEEDED, reasons.CONTENT_BUDGET_EXCEEDED, reasons.TOO_MANY_OPEN_REVIEWS)
    }


def _largest(case_id: str) -> review_pb2.StartReviewRequest:
    evidence, policy = _largest_content()
    return review_pb2.StartReviewRequest(
        case_id=case_id, action="record_support_review", body="b" * MAX_BODY_BYTES, evidence=evidence, policy=policy
    )


def test_over_its_call_rate_a_principal_waits_the_delay_it_is_told_and_others_are_not_held(
    secure_stacks: Callable[..., SecureStack],
) -> None:
    clock = BudgetClock()
    limits = AuthorLimits(calls_per_second=1.0, call_burst=2, content_bytes_per_minute=0, open_reviews=0)
    secure = secure_stacks(author_limits=limits, monotonic=clock)
    first = _start(secure, "arthur", start_request(case_id="T-1"))
    assert _start(secure, "arthur", start_request(case_id="T-2")).created
    before = snapshot(secure.stack.orchestrator_url)

    refused = _refused(lambda: _start(secure, "arthur", start_request(case_id="T-3")))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.details()
    assert error_info(refused)[:2] == (
        reasons.CALL_RATE_EXCEEDED,
        {reasons.PRINCIPAL: "arthur", reasons.RETRY_AFTER: "1.000s"},
    )
    assert retry_delay(refused) == 1.0
    # An edit is a call of the same budget, and a repeat of content already stored is charged too.
    edit = _refused(lambda: _edit(secure, "arthur", first.proposal.operation_id, "Edited."))
    again = _refused(lambda: _start(secure, "arthur", start_request(case_id="T-1")))
    assert {error_info(e)[0] for e in (edit, again)} == {reasons.CALL_RATE_EXCEEDED}
    assert snapshot(secure.stack.orchestrator_url) == before

    # Another principal has a budget of its own.
    assert _start(secure, "sam", start_request(case_id="T-3")).created

    clock.now += 0.5
    halfway = _refused(lambda: _start(secure, "arthur", start_request(case_id="T-4")))
    assert (error_info(halfway)[1][reasons.RETRY_AFTER], retry_delay(halfway)) == ("0.500s", 0.5)
    clock.now += 0.5
    assert _start(secure, "arthur", start_request(case_id="T-4")).created
    assert _refusals(secure) == {
        reasons.CALL_RATE_EXCEEDED: 4,
        reasons.CONTENT_BUDGET_EXCEEDED: 0,
        reasons.TOO_MANY_OPEN_REVIEWS: 0,
    }


def test_the_content_budget_counts_bytes_not_calls_and_refills_by_the_minute(
    secure_stacks: Callable[..., SecureStack],
) -> None:
    clock = BudgetClock()
    size = start_from_pb(_largest("L-1")).content.size_bytes
    budget = 2 * size + 10_000
    limits = AuthorLimits(calls_per_second=0, call_burst=1, content_bytes_per_minute=budget, open_reviews=0)
    secure = secure_stacks(author_limits=limits, monotonic=clock)
    assert _start(secure, "arthur", _largest("L-1")).created
    assert _start(secure, "arthur", _largest("L-2")).created

    refused = _refused(lambda: _start(secure, "arthur", _largest("L-3")))
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.details()
    reason, metadata, _ = error_info(refused)
    wait = math.ceil((size - 10_000) / (budget / 60) * 1000) / 1000
    assert (reason, metadata[reasons.CONTENT_BYTES]) == (reasons.CONTENT_BUDGET_EXCEEDED, str(size))
    assert retry_delay(refused) == pytest.approx(wait)
    # What is left still takes a small proposal, and another principal is not held by this one's bytes.
    assert _start(secure, "arthur", start_request(case_id="T-1")).created
    assert _start(secure, "sam", _largest("L-3")).created

    not_yet = _refused(lambda: _start(secure, "arthur", _largest("L-4")))
    delay = retry_delay(not_yet)
    assert delay is not None and delay > wait  # the small proposal's bytes were spent too
    clock.now += delay
    assert _start(secure, "arthur", _largest("L-4")).created
    assert _refusals(secure)[reasons.CONTENT_BUDGET_EXCEEDED] == 2


def test_an_author_at_the_open_review_cap_adds_no_more_until_one_is_decided(
    secure_stacks: Callable[..., SecureStack], database_url: str
) -> None:
    limits = AuthorLimits(calls_per_second=0, call_burst=1, content_bytes_per_minute=0, open_reviews=2)
    secure = secure_stacks(database_url, author_limits=limits)
    t1 = _start(secure, "arthur", start_request(case_id="T-1")).proposal
    t2 = _start(secure, "arthur", start_request(case_id="T-2")).proposal
    before = snapshot(secure.stack.orchestrator_url)

    refused = _refused(lambda: _start(secure, "arthur", start_request(case_id="T-3")))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.details()
    assert error_info(refused)[:2] == (
        reasons.TOO_MANY_OPEN_REVIEWS,
        {reasons.PRINCIPAL: "arthur", reasons.OPEN_REVIEW_LIMIT: "2"},
    )
    assert retry_delay(refused) is None  # no wait helps: a review must be decided first
    assert snapshot(secure.stack.orchestrator_url) == before

    # A repeat of stored content adds nothing; work on the author's own open cases adds nothing either.
    assert not _start(secure, "arthur", start_request(case_id="T-1")).created
    replacing = start_request(case_id="T-1", body="A better reply.")
    replacing.expected_operation_id = t1.operation_id
    t1 = _start(secure, "arthur", replacing).proposal
    assert _edit(secure, "arthur", t2.operation_id, "An edited reply.").proposal.created_by == "arthur"

    # Other authors are not held; an edit that would put one more of arthur's proposals in the inbox is.
    t3 = _start(secure, "sam", start_request(case_id="T-3")).proposal
    edit = _refused(lambda: _edit(secure, "arthur", t3.operation_id, "Arthur's take."))
    assert (edit.code(), error_info(edit)[0]) == (grpc.StatusCode.FAILED_PRECONDITION, reasons.TOO_MANY_OPEN_REVIEWS)

    # A decision frees a place.
    decided = secure.stack.review().Approve(decline(t1.operation_id), metadata=secure.as_("rita"), timeout=30)
    assert decided.outcome == common_pb2.OUTCOME_DECLINED
    assert _start(secure, "arthur", start_request(case_id="T-4")).created
    assert _refusals(secure)[reasons.TOO_MANY_OPEN_REVIEWS] == 2


def test_racing_calls_of_one_author_cannot_all_pass_the_cap(
    secure_stacks: Callable[..., SecureStack], database_url: str
) -> None:
    limits = AuthorLimits(calls_per_second=0, call_burst=1, content_bytes_per_minute=0, open_reviews=3)
    secure = secure_stacks(database_url, author_limits=limits)
    for case_id in ("T-1", "T-2"):
        _start(secure, "arthur", start_request(case_id=case_id))

    def start(n: int) -> str:
        try:
            return "created" if _start(secure, "arthur", start_request(case_id=f"R-{n}")).created else "existing"
        except grpc.RpcError as error:
            return error_info(error)[0] or error.code().name

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(start, range(8)))

    assert sorted(answers) == sorted(["created"] + [reasons.TOO_MANY_OPEN_REVIEWS] * 7)
    inbox = secure.stack.review().ListPendingReviews(
        review_pb2.ListPendingReviewsRequest(created_by="arthur"), metadata=secure.as_("rita"), timeout=30
    )
    assert len(inbox.entries) == 3
