"""The reviewer's and author's pages: the inbox, a proposal with what changed, its decision, an edit,
and starting a case. Each POST carries the operation id the page showed; the orchestrator decides."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from decisionflow.client import (
    AsyncReviewClient,
    Decision,
    DecisionflowError,
    InvalidRequest,
    OperationView,
    PendingReviewPage,
    ProposalView,
)
from decisionflow_console.access import DECIDE, EDIT, INBOX, READ_PROPOSAL, START
from decisionflow_console.diff import ProposalDiff, proposal_diff
from decisionflow_console.eligibility import why_not_decide
from decisionflow_console.forms import FormError, ProposalForm, field_label, form_field
from decisionflow_console.marking import reveal, revealed
from decisionflow_console.orchestrator import Orchestrator
from decisionflow_console.pages import Pages
from decisionflow_console.paging import counted_past, paging, position
from decisionflow_console.posts import posted_form
from decisionflow_console.refusals import Link, explain, proposal_path
from decisionflow_console.sessions import Session
from decisionflow_console.web import current_session

# Pending reviews per inbox page.
INBOX_PAGE_SIZE = 25
# How much of a body the inbox's summary column shows: enough to tell cases apart at a glance.
SUMMARY_WORDS = 12
SUMMARY_CHARS = 100
# The inbox's filter each field of ListPendingReviews comes from, to say a refusal where it was typed.
_FILTER_OF = {"case_id_prefix": "case", "created_by": "author", "page_token": "page"}


def signed_in(request: Request) -> Session | None:
    """Return the request's signed-in session, or None."""
    session = current_session(request)
    return session if session is not None and session.signed_in else None


def to_sign_in(request: Request) -> Response:
    """Return a redirect to the sign-in that comes back to this page."""
    return RedirectResponse(f"/login?next={request.url.path}", status_code=303)


# An operation id as the orchestrator writes it: only such a value is put in a link back.
OPERATION_ID = re.compile(r"op-v1-[0-9a-f]{64}")


def proposal_page(proposal: ProposalView, operation: OperationView, changes: ProposalDiff | None) -> dict[str, Any]:
    """The proposal page's context: the proposal, its operation and its changes, every string marked (marking)."""
    return {"proposal": revealed(proposal), "operation": revealed(operation), "changes": revealed(changes)}


class ReviewPages:
    """Inbox, proposal, decision, edit and start, calling the orchestrator as the signed-in person."""

    def __init__(self, orchestrator: Orchestrator, pages: Pages) -> None:
        self._orchestrator = orchestrator
        self._pages = pages

    async def inbox(self, request: Request) -> Response:
        """The reviewer's inbox: current, undecided proposals, in inbox order, filtered by case id prefix
        and author, a page at a time."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        filters = {name: request.query_params.get(name, "").strip() for name in ("case", "author")}
        at = position(request)
        review = self._review(session)
        try:
            page = await _pending(review, filters, at.token, INBOX_PAGE_SIZE, counted=True)
            rows, total = len(page.entries), page.total_size
            more = bool(page.next_page_token) and counted_past(at, rows=rows, page_size=INBOX_PAGE_SIZE, total=total)
            if page.next_page_token and not more:
                # A full page the total does not show more after: one row more says whether a next page holds any.
                more = bool((await _pending(review, filters, page.next_page_token, 1)).entries)
        except InvalidRequest as error:
            # A filter the orchestrator refused: said at its field, in the form that fixes it.
            problems = {_FILTER_OF.get(v.field, "case"): v.description for v in error.violations}
            return self._pages.render(
                request, "inbox.html", status=400, rows=(), filters=filters, problems=problems, paging=None
            )
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=INBOX.doing, role=INBOX.role))
        kept = {name: value for name, value in filters.items() if value}
        return self._pages.render(
            request,
            "inbox.html",
            rows=tuple((revealed(entry), reveal(summary(entry.proposal.body))) for entry in page.entries),
            filters=filters,
            problems={},
            paging=paging(
                "/inbox",
                kept,
                at,
                rows=rows,
                page_size=INBOX_PAGE_SIZE,
                next_token=page.next_page_token,
                more=more,
                total=total,
            ),
        )

    async def case(self, request: Request) -> Response:
        """Open a case's current proposal."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        case_id = request.query_params.get("case_id", "").strip()
        try:
            record = await self._review(session).get_proposal(case_id=case_id)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="read this case", role=READ_PROPOSAL.role))
        return RedirectResponse(proposal_path(record.proposal.operation_id), status_code=303)

    async def proposal(self, request: Request) -> Response:
        """Show one proposal exactly as its operation id binds it, with what changed from its parent."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        operation_id = request.path_params["operation_id"]
        review = self._review(session)
        try:
            record = await review.get_proposal(operation_id=operation_id)
            changes = await self._changes(session, record.proposal)
            progress = record.operation.progress
            # Under a rule, one call more says who the orchestrator takes the person to be (their groups).
            why_not = None
            if progress is not None and DECIDE.admits(session.roles):
                why_not = why_not_decide(progress, record.proposal, await review.get_caller())
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=READ_PROPOSAL.doing, role=READ_PROPOSAL.role))
        return self._pages.render(
            request, "proposal.html", why_not=why_not, **proposal_page(record.proposal, record.operation, changes)
        )

    async def _changes(self, session: Session, proposal: ProposalView) -> ProposalDiff | None:
        if not proposal.parent_operation_id:
            return None
        parent = await self._review(session).get_proposal(operation_id=proposal.parent_operation_id)
        return proposal_diff(parent.proposal, proposal)

    async def decide(self, request: Request) -> Response:
        """Send the decision on the operation id the page showed, and show the outcome or the refusal."""
        checked = await posted_form(self._pages, request, signed_in(request), _proposal_of)
        if isinstance(checked, Response):
            return checked
        session, form = checked
        operation_id = _field(form, "operation_id")
        decision = Decision.parse(_field(form, "decision"))
        doing = "decline this proposal" if decision is Decision.DECLINE else "approve this proposal"
        try:
            result = await self._review(session).decide(operation_id, decision)
        except DecisionflowError as error:
            refusal = explain(error, doing=doing, role=DECIDE.role, deciding=True)
            if refusal.link is None and OPERATION_ID.fullmatch(operation_id):
                # A decision refused (four-eyes, a missing role, …) leads back to what was being decided.
                refusal = dataclasses.replace(refusal, link=Link(proposal_path(operation_id), "Back to the proposal"))
            return self._pages.refusal(request, refusal)
        return self._pages.render(request, "outcome.html", result=result, operation_id=operation_id)

    async def edit_form(self, request: Request) -> Response:
        """Show the edit form of a proposal, carrying its operation id as the expected one."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        operation_id = request.path_params["operation_id"]
        try:
            record = await self._review(session).get_proposal(operation_id=operation_id)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=READ_PROPOSAL.doing, role=READ_PROPOSAL.role))
        form = ProposalForm.of(record.proposal)
        return self._pages.render(request, "edit.html", form=form, expected_operation_id=operation_id, problems={})

    async def edit(self, request: Request) -> Response:
        """Replace the proposal the form was opened on, if it is still the case's current one."""
        checked = await posted_form(self._pages, request, signed_in(request), _edit_form_of)
        if isinstance(checked, Response):
            return checked
        session, posted = checked
        expected = _field(posted, "expected_operation_id")
        form = ProposalForm.posted(posted)
        try:
            evidence, policy = form.evidence_items(), form.policy()
            edited = await self._review(session).edit_proposal(expected, form.body, evidence, policy)
        except (FormError, InvalidRequest) as problem:
            return self._form_again(request, "edit.html", form, problem, expected_operation_id=expected)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="edit this proposal", role=EDIT.role))
        return RedirectResponse(proposal_path(edited.proposal.operation_id), status_code=303)

    async def start_form(self, request: Request) -> Response:
        """Show the form that starts a case's review."""
        if signed_in(request) is None:
            return to_sign_in(request)
        return self._pages.render(request, "start.html", form=ProposalForm(), problems={})

    async def start(self, request: Request) -> Response:
        """Start a review of the posted proposal and open its page."""
        checked = await posted_form(self._pages, request, signed_in(request), "/start")
        if isinstance(checked, Response):
            return checked
        session, posted = checked
        form = ProposalForm.posted(posted)
        try:
            evidence, policy = form.evidence_items(), form.policy()
            started = await self._review(session).start_review(form.case_id, form.action, form.body, evidence, policy)
        except (FormError, InvalidRequest) as problem:
            return self._form_again(request, "start.html", form, problem)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=START.doing, role=START.role))
        return RedirectResponse(proposal_path(started.proposal.operation_id), status_code=303)

    def _form_again(
        self, request: Request, template: str, form: ProposalForm, problem: FormError | InvalidRequest, **context: Any
    ) -> Response:
        """The form as posted, 400, with each problem (the console's reading, or the orchestrator's refusal)
        at its field; nothing was sent, or nothing recorded."""
        if isinstance(problem, FormError):
            problems = {problem.field: str(problem)}
        else:
            named = ((form_field(v.field), v.description) for v in problem.violations)
            problems = {name: f"{field_label(name)}: {description}" for name, description in named}
        return self._pages.render(
            request, template, status=400, form=form.with_spare_rows(), problems=problems, **context
        )

    def _review(self, session: Session) -> AsyncReviewClient:
        if session.access_token is None:
            raise RuntimeError("a signed-in session holds an access token")
        return self._orchestrator.review(session.access_token)


def summary(body: str) -> str:
    """The first words of a proposal's body, for the inbox: up to SUMMARY_WORDS words split at spaces
    (U+0020) and line breaks only, so any other space stays in the text to be marked, and at most
    SUMMARY_CHARS characters; "…" ends it when the body goes on."""
    words = [word for word in re.split(r"[ \n]+", body) if word]
    shown = " ".join(words[:SUMMARY_WORDS])
    cut = len(words) > SUMMARY_WORDS or len(shown) > SUMMARY_CHARS
    return shown[:SUMMARY_CHARS] + "…" if cut else shown


async def _pending(
    review: AsyncReviewClient, filters: dict[str, str], token: str, size: int, *, counted: bool = False
) -> PendingReviewPage:
    return await review.list_pending_reviews(
        page_size=size,
        page_token=token,
        case_id_prefix=filters["case"] or None,
        created_by=filters["author"] or None,
        include_total_size=counted,
    )


def _proposal_of(form: FormData) -> str:
    """The page a decision was sent from: its proposal's."""
    operation_id = _field(form, "operation_id")
    return proposal_path(operation_id) if OPERATION_ID.fullmatch(operation_id) else "/"


def _edit_form_of(form: FormData) -> str:
    """The page an edit was sent from: the edit form of the proposal it replaces."""
    expected = _field(form, "expected_operation_id")
    return proposal_path(expected) + "/edit" if OPERATION_ID.fullmatch(expected) else "/"


def _field(form: FormData, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""
