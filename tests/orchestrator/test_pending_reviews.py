"""ListPendingReviews on a real orchestrator and receiver with authentication on: three cases started,
one edited, one decided; the inbox lists the two undecided current proposals oldest first with their
version counts, pages of one walk it all, the filters match, bad input is refused with INVALID_ARGUMENT
naming the field, and only reviewers, authors and operators may read it. The Python clients, sync and
asyncio, read the same inbox as typed views."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from decisionflow.client import AsyncReviewClient, PendingReviewEntry, PermissionDenied, ReviewClient
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from decisionflow_server.foundation import page_tokens
from decisionflow_server.runtime.auth import bearer_metadata
from tests.support.secure import SecureStack, start_secure_stack
from tests.support.stack import T1042_BODY, start_request


@dataclass(frozen=True)
class Inbox:
    """The seeded stack: the expected inbox in order (operation ids) and the decided operation id."""

    secure: SecureStack
    first: str  # T-PR-1, started by arthur, never edited
    edited: str  # T-PR-2 as sam edited it (its second version)
    superseded: str  # T-PR-2 as arthur started it
    decided: str  # T-PR-3, approved by rita

    def list(self, principal: str = "rita", /, **fields: object) -> review_pb2.ListPendingReviewsResponse:
        request = review_pb2.ListPendingReviewsRequest(**fields)  # type: ignore[arg-type]
        return self.secure.stack.review().ListPendingReviews(request, metadata=self.secure.as_(principal), timeout=10)

    def refused(self, principal: str = "rita", /, **fields: object) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as refused:
            self.list(principal, **fields)
        return refused.value


@pytest.fixture(scope="module")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inbox]:
    """Start T-PR-1..3 as arthur, edit T-PR-2 as sam, approve T-PR-3 as rita."""
    secure = start_secure_stack(tmp_path_factory.mktemp("pending"))
    try:
        review = secure.stack.review()
        ids = [
            review.StartReview(
                start_request(case_id=f"T-PR-{n}"), metadata=secure.as_("arthur"), timeout=15
            ).proposal.operation_id
            for n in (1, 2, 3)
        ]
        edit = review_pb2.EditProposalRequest(
            expected_operation_id=ids[1],
            body=T1042_BODY + " Edited.",
            evidence=list(start_request().evidence),
            policy=start_request().policy,
        )
        edited = review.EditProposal(edit, metadata=secure.as_("sam"), timeout=15).proposal.operation_id
        approval = review_pb2.ApproveRequest(operation_id=ids[2], decision=common_pb2.DECISION_APPROVE)
        assert review.Approve(approval, metadata=secure.as_("rita"), timeout=15).outcome == common_pb2.OUTCOME_COMMITTED
        yield Inbox(secure, ids[0], edited, ids[1], ids[2])
    finally:
        secure.close()


def _ids(response: review_pb2.ListPendingReviewsResponse) -> list[str]:
    return [entry.proposal.operation_id for entry in response.entries]


def test_the_inbox_lists_the_undecided_current_proposals_oldest_first(inbox: Inbox) -> None:
    listed = inbox.list()
    assert _ids(listed) == [inbox.first, inbox.edited]
    assert listed.next_page_token == ""
    first, edited = listed.entries
    assert (first.versions, edited.versions) == (1, 2)
    assert (first.proposal.case_id, edited.proposal.case_id) == ("T-PR-1", "T-PR-2")
    assert (first.proposal.created_by, edited.proposal.created_by) == ("arthur", "sam")
    assert first.proposal.current and edited.proposal.current
    assert edited.proposal.human_edited and edited.proposal.parent_operation_id == inbox.superseded
    assert first.proposal.created_at.ToDatetime() < edited.proposal.created_at.ToDatetime()
    for entry in listed.entries:
        assert entry.pending_review.operation_id == entry.proposal.operation_id
        assert entry.pending_review.checkpoint_id and entry.pending_review.workflow_name
    # The same entry as GetProposal and the pending review StartReview reported.
    shown = inbox.secure.stack.review().GetProposal(
        review_pb2.GetProposalRequest(operation_id=inbox.first), metadata=inbox.secure.as_("rita"), timeout=10
    )
    assert first.proposal == shown.proposal
    assert shown.operation.state == common_pb2.OPERATION_STATE_PENDING_REVIEW


def test_pages_of_one_walk_the_whole_inbox(inbox: Inbox) -> None:
    walked: list[str] = []
    token = ""
    for _ in range(5):
        page = inbox.list(page_size=1, page_token=token)
        assert len(page.entries) <= 1
        walked += _ids(page)
        token = page.next_page_token
        if not token:
            break
    assert walked == [inbox.first, inbox.edited]


def test_filters_select_by_case_prefix_author_and_action(inbox: Inbox) -> None:
    assert _ids(inbox.list(case_id="T-PR-2")) == [inbox.edited]
    assert _ids(inbox.list(case_id="T-PR-3")) == []  # decided
    assert _ids(inbox.list(case_id_prefix="T-PR-")) == [inbox.first, inbox.edited]
    assert _ids(inbox.list(case_id_prefix="T-PR-1")) == [inbox.first]
    assert _ids(inbox.list(case_id_prefix="t-pr-")) == []  # compared exactly: case matters
    assert _ids(inbox.list(created_by="sam")) == [inbox.edited]
    assert _ids(inbox.list(created_by="arthur")) == [inbox.first]
    assert _ids(inbox.list(created_by="nobody")) == []
    assert _ids(inbox.list(action="record_support_review", created_by="arthur")) == [inbox.first]


BAD_REQUESTS: dict[str, tuple[dict[str, object], str]] = {
    "negative page size": ({"page_size": -1}, "page_size"),
    "page size over 500": ({"page_size": 501}, "page_size"),
    "not a token": ({"page_token": "%%%"}, "page_token"),
    "a token of ListOperations": (
        {"page_token": page_tokens.encode("operations", "2026-01-01T00:00:00+00:00", "op-v1-" + "0" * 64)},
        "page_token",
    ),
    "a token without a UTC offset": (
        {"page_token": page_tokens.encode("pending_reviews", 2, *["2026-01-01T00:00:00"] * 2, "op-v1-" + "0" * 64)},
        "page_token",
    ),
    "a token of a rank the order has not": (
        {
            "page_token": page_tokens.encode(
                "pending_reviews", 3, *["2026-01-01T00:00:00+00:00"] * 2, "op-v1-" + "0" * 64
            )
        },
        "page_token",
    ),
    "a token of a release that listed oldest first only": (
        {"page_token": page_tokens.encode("pending_reviews", "2026-01-01T00:00:00+00:00", "op-v1-" + "0" * 64)},
        "page_token",
    ),
    "empty case id": ({"case_id": ""}, "case_id"),
    "malformed case id": ({"case_id": "T 1; DROP TABLE cases"}, "case_id"),
    "wildcard prefix": ({"case_id_prefix": "T%"}, "case_id_prefix"),
    "case id and prefix": ({"case_id": "T-PR-1", "case_id_prefix": "T-"}, "case_id_prefix"),
    "empty author": ({"created_by": ""}, "created_by"),
    "author with a NUL": ({"created_by": "arthur\x00"}, "created_by"),
    "author with surrounding spaces": ({"created_by": " arthur"}, "created_by"),
    "unknown action": ({"action": "wire_money"}, "action"),
}


@pytest.mark.parametrize("what", sorted(BAD_REQUESTS))
def test_bad_input_is_refused_with_invalid_argument_naming_the_field(inbox: Inbox, what: str) -> None:
    fields, field = BAD_REQUESTS[what]
    error = inbox.refused(**fields)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert field in [violation.field for violation in error_info(error)[2]]


def test_an_issued_token_resumes_after_its_entry(inbox: Inbox) -> None:
    first_page = inbox.list(page_size=1)
    assert first_page.next_page_token
    assert _ids(inbox.list(page_size=1, page_token=first_page.next_page_token)) == [inbox.edited]


@pytest.mark.parametrize("principal", ["rita", "arthur", "olga"])
def test_reviewers_authors_and_operators_read_the_inbox(inbox: Inbox, principal: str) -> None:
    assert _ids(inbox.list(principal)) == [inbox.first, inbox.edited]


@pytest.mark.parametrize("principal", ["walter", "edna"])
def test_effect_writers_and_readers_are_refused(inbox: Inbox, principal: str) -> None:
    assert inbox.refused(principal).code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_call_without_credentials_is_refused(inbox: Inbox) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        inbox.secure.stack.review().ListPendingReviews(review_pb2.ListPendingReviewsRequest(), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _summary(entries: list[PendingReviewEntry]) -> list[tuple[str, int, str]]:
    return [(e.proposal.operation_id, e.versions, e.pending_review.operation_id) for e in entries]


def test_the_client_reads_pages_and_iterates_over_all_of_them(inbox: Inbox) -> None:
    expected = [(inbox.first, 1, inbox.first), (inbox.edited, 2, inbox.edited)]
    channel = inbox.secure.channel(receiver=False)
    reviews = ReviewClient(channel, timeout=10, metadata=inbox.secure.as_("rita"))
    page = reviews.list_pending_reviews(page_size=1)
    assert _summary(list(page.entries)) == expected[:1] and page.next_page_token
    rest = reviews.list_pending_reviews(page_size=1, page_token=page.next_page_token)
    assert _summary(list(rest.entries)) == expected[1:]
    assert _summary(list(reviews.iter_pending_reviews(page_size=1))) == expected
    assert _summary(list(reviews.iter_pending_reviews(created_by="sam"))) == expected[1:]
    assert page.entries[0].proposal.created_by == "arthur" and page.entries[0].proposal.current
    writer = ReviewClient(channel, timeout=10, metadata=inbox.secure.as_("walter"))
    with pytest.raises(PermissionDenied):
        writer.list_pending_reviews()


def test_the_async_client_reads_the_same_inbox(inbox: Inbox) -> None:
    port = inbox.secure.stack.orchestrator_port
    token = inbox.secure.tokens["olga"]

    async def read() -> tuple[list[PendingReviewEntry], list[PendingReviewEntry]]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            reviews = AsyncReviewClient(channel, timeout=10, metadata=bearer_metadata(token))
            page = await reviews.list_pending_reviews(case_id_prefix="T-PR-")
            walked = [entry async for entry in reviews.iter_pending_reviews(page_size=1)]
            return list(page.entries), walked

    page, walked = asyncio.run(read())
    expected = [(inbox.first, 1, inbox.first), (inbox.edited, 2, inbox.edited)]
    assert _summary(page) == expected
    assert _summary(walked) == expected
