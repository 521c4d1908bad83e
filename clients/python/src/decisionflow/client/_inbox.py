"""The reviewer's inbox (ListPendingReviews) on ReviewClient and AsyncReviewClient: one page at a
time, for a console that pages, or every page through an iterator, for a script.

Both clients build the same request and read the same page; only the call differs, through the
same seam (``_calls``) as every other method: a deadline per attempt, the retry policy, typed errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from decisionflow.client import _convert as convert
from decisionflow.client._calls import AsyncCallSettings, CallSettings, call, call_async
from decisionflow.client.views import PendingReviewEntry, PendingReviewPage
from decisionflow.v1 import review_pb2, review_pb2_grpc


class _SyncReview(Protocol):
    @property
    def _stub(self) -> review_pb2_grpc.ReviewServiceStub: ...

    @property
    def _settings(self) -> CallSettings: ...


class _AsyncReview(Protocol):
    @property
    def _stub(self) -> review_pb2_grpc.ReviewServiceAsyncStub: ...

    @property
    def _settings(self) -> AsyncCallSettings: ...


def _request(
    page_size: int,
    page_token: str,
    case_id: str | None,
    case_id_prefix: str | None,
    created_by: str | None,
    action: str | None,
    include_total_size: bool = False,
) -> review_pb2.ListPendingReviewsRequest:
    # None leaves a filter unset (any); the server refuses a filter set but empty.
    return review_pb2.ListPendingReviewsRequest(
        page_size=page_size,
        page_token=page_token,
        case_id=case_id,
        case_id_prefix=case_id_prefix,
        created_by=created_by,
        action=action,
        include_total_size=include_total_size,
    )


class Inbox:
    """ListPendingReviews for ReviewClient."""

    def list_pending_reviews(
        self: _SyncReview,
        *,
        page_size: int = 0,
        page_token: str = "",
        case_id: str | None = None,
        case_id_prefix: str | None = None,
        created_by: str | None = None,
        action: str | None = None,
        include_total_size: bool = False,
    ) -> PendingReviewPage:
        """Return one page of the cases' current, undecided proposals, in inbox order (page_size 0: 50).

        Inbox order: escalated reviews first, then by due time, then oldest first, across pages.
        Filters left None match anything; case_id and case_id_prefix exclude each other. Pass the
        page's next_page_token back (with the same filters) for the next page. include_total_size:
        the page's total_size says how many entries match over every page (a count the orchestrator
        makes on each such call).
        """
        request = _request(page_size, page_token, case_id, case_id_prefix, created_by, action, include_total_size)
        return convert.pending_review_page(call(self._stub.ListPendingReviews, request, self._settings))

    def iter_pending_reviews(
        self: _SyncReview,
        *,
        page_size: int = 0,
        case_id: str | None = None,
        case_id_prefix: str | None = None,
        created_by: str | None = None,
        action: str | None = None,
    ) -> Iterator[PendingReviewEntry]:
        """Yield every pending review matching the filters, in inbox order; pages are fetched as the
        iterator advances, each call retried on its own."""
        request = _request(page_size, "", case_id, case_id_prefix, created_by, action)
        while True:
            page = convert.pending_review_page(call(self._stub.ListPendingReviews, request, self._settings))
            yield from page.entries
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token


class AsyncInbox:
    """ListPendingReviews for AsyncReviewClient."""

    async def list_pending_reviews(
        self: _AsyncReview,
        *,
        page_size: int = 0,
        page_token: str = "",
        case_id: str | None = None,
        case_id_prefix: str | None = None,
        created_by: str | None = None,
        action: str | None = None,
        include_total_size: bool = False,
    ) -> PendingReviewPage:
        """Return one page of the cases' current, undecided proposals, in inbox order (see
        ``ReviewClient.list_pending_reviews``)."""
        request = _request(page_size, page_token, case_id, case_id_prefix, created_by, action, include_total_size)
        return convert.pending_review_page(await call_async(self._stub.ListPendingReviews, request, self._settings))

    async def iter_pending_reviews(
        self: _AsyncReview,
        *,
        page_size: int = 0,
        case_id: str | None = None,
        case_id_prefix: str | None = None,
        created_by: str | None = None,
        action: str | None = None,
    ) -> AsyncIterator[PendingReviewEntry]:
        """Yield every pending review matching the filters, in inbox order; pages are fetched as the
        iterator advances, each call retried on its own."""
        request = _request(page_size, "", case_id, case_id_prefix, created_by, action)
        while True:
            page = convert.pending_review_page(await call_async(self._stub.ListPendingReviews, request, self._settings))
            for entry in page.entries:
                yield entry
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token
