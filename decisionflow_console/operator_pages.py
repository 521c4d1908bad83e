"""The operator's desk (role operator, as for ``decisionflow ops``): open operations with their age,
Unknown first, then APPROVED ones oldest first, a page of each (``paging``); one operation's every
field (with a link to its audit trail for those who may read the log); a re-drive and a recorded
lookup, each behind a confirmation page."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from decisionflow.client import (
    AsyncOperationsClient,
    Consistency,
    DecisionflowError,
    LookupStatus,
    OperationState,
    OperationView,
    Receipt,
    Settlement,
)
from decisionflow.vocabulary import OperationId
from decisionflow_console.access import DESK, REDRIVE, SETTLE, Use
from decisionflow_console.orchestrator import Orchestrator
from decisionflow_console.pages import Pages
from decisionflow_console.paging import Paging, Position, counted_past, paging, position
from decisionflow_console.posts import posted_form
from decisionflow_console.refusals import explain
from decisionflow_console.review_pages import signed_in, to_sign_in
from decisionflow_console.sessions import Session

# Rows per state and page: the desk is for what needs a person, not for browsing history.
ROWS_PER_STATE = 200
DESK_STATES = (OperationState.UNKNOWN, OperationState.APPROVED)


class OperatorPages:
    """Desk, describe, re-drive and settle, calling the orchestrator as the signed-in operator."""

    def __init__(self, orchestrator: Orchestrator, pages: Pages) -> None:
        self._orchestrator = orchestrator
        self._pages = pages

    async def desk(self, request: Request) -> Response:
        """List open operations: Unknown first, then APPROVED, each oldest first (or one state asked for)."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        asked = OperationState.__members__.get(request.query_params.get("state", "").upper())
        if asked is OperationState.UNSPECIFIED:
            asked = None
        states = (asked,) if asked is not None else DESK_STATES
        # A page token resumes one state's listing: only a state asked for alone is paged past its first page.
        at = position(request) if asked is not None else Position("", ())
        client = self._operations(session)
        try:
            sections = [await _section(client, state, at) for state in states]
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=DESK.doing, role=DESK.role))
        return self._pages.render(
            request,
            "desk.html",
            sections=sections,
            last_lookup=_last_lookup(section.rows for section in sections),
            states=[s for s in OperationState if s is not OperationState.UNSPECIFIED],
            asked=asked,
            now=datetime.now(UTC),
        )

    async def describe(self, request: Request) -> Response:
        """Show every field of one operation, with the re-drive and settle actions (to an operator only)."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        return await self._about_operation(request, session, DESK, "operation.html", now=datetime.now(UTC))

    async def confirm_redrive(self, request: Request) -> Response:
        """Ask before a re-drive: say what it does, naming the operation's case."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        return await self._about_operation(request, session, REDRIVE, "confirm_redrive.html")

    async def redrive(self, request: Request) -> Response:
        """Re-drive the operation (Apply again with the same key and stored payload) and show the outcome."""
        checked = await posted_form(self._pages, request, signed_in(request), request.url.path)
        if isinstance(checked, Response):
            return checked
        session, _ = checked
        operation_id = request.path_params["operation_id"]
        try:
            result = await self._operations(session).redrive_operation(operation_id)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=REDRIVE.doing, role=REDRIVE.role))
        return self._pages.render(
            request, "redriven.html", outcome=result.outcome, operation=result.operation, now=datetime.now(UTC)
        )

    async def settle_form(self, request: Request) -> Response:
        """Show the form that records a lookup made at the receiver, naming the operation's case."""
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        return await self._about_operation(request, session, SETTLE, "settle.html", problem="", values={})

    async def settle(self, request: Request) -> Response:
        """Record the lookup once confirmed; before that, show what would be recorded."""
        checked = await posted_form(self._pages, request, signed_in(request), request.url.path)
        if isinstance(checked, Response):
            return checked
        session, form = checked
        operation_id = request.path_params["operation_id"]
        values = {name: _field(form, name) for name in ("status", "consistency", "receipt_id")}
        try:
            settlement = _settlement(operation_id, values, datetime.now(UTC))
        except ValueError as problem:
            return await self._about_operation(
                request, session, SETTLE, "settle.html", status=400, problem=str(problem), values=values
            )
        if _field(form, "confirmed") != "yes":
            return await self._about_operation(
                request, session, SETTLE, "confirm_settle.html", settlement=settlement, values=values
            )
        try:
            result = await self._operations(session).settle_operation(settlement)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=SETTLE.doing, role=SETTLE.role))
        return self._pages.render(
            request, "settled.html", settled=result.settled, operation=result.operation, now=datetime.now(UTC)
        )

    async def _about_operation(
        self, request: Request, session: Session, use: Use, template: str, *, status: int = 200, **context: Any
    ) -> Response:
        """Render template with the operation the path names (its case heads the page), or the refusal."""
        operation_id = request.path_params["operation_id"]
        try:
            operation = await self._orchestrator.review(_token(session)).get_operation(operation_id)
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing=use.doing, role=use.role))
        return self._pages.render(request, template, status=status, operation=operation, **context)

    def _operations(self, session: Session) -> AsyncOperationsClient:
        return self._orchestrator.operations(_token(session))


@dataclass(frozen=True, slots=True)
class DeskSection:
    """One state's page of the desk: its rows and where they stand in the state's listing."""

    state: OperationState
    rows: tuple[OperationView, ...]
    paging: Paging


async def _section(client: AsyncOperationsClient, state: OperationState, at: Position) -> DeskSection:
    """The page of state's operations at position at with the state's total; a full page whose total does not
    show more rows asks for one row past it to know."""
    page = await client.list_operations_page(
        [state], page_size=ROWS_PER_STATE, page_token=at.token, include_total_size=True
    )
    rows, token, total = len(page.operations), page.next_page_token, page.total_size
    more = bool(token) and counted_past(at, rows=rows, page_size=ROWS_PER_STATE, total=total)
    if token and not more:
        after = await client.list_operations_page([state], page_size=1, page_token=token)
        more = bool(after.operations)
    kept = {"state": state.value.lower()}
    shown = paging(
        "/operations", kept, at, rows=rows, page_size=ROWS_PER_STATE, next_token=token, more=more, total=total
    )
    return DeskSection(state, page.operations, shown)


def _settlement(operation_id: str, values: dict[str, str], now: datetime) -> Settlement:
    """Return the settlement the form describes; raise ValueError for a combination the server would refuse."""
    status = LookupStatus.__members__.get(values["status"].upper())
    consistency = Consistency.__members__.get(values["consistency"].upper())
    if status not in (LookupStatus.APPLIED, LookupStatus.NOT_FOUND):
        raise ValueError("choose what the lookup found: applied or not found")
    if consistency not in (Consistency.STRONG, Consistency.EVENTUAL):
        raise ValueError("choose where the answer came from: the primary (strong) or a replica (eventual)")
    receipt_id = values["receipt_id"].strip()
    if status is LookupStatus.APPLIED and not receipt_id:
        raise ValueError("an applied lookup needs the receipt id it showed")
    if status is LookupStatus.NOT_FOUND and receipt_id:
        raise ValueError("a lookup that found nothing has no receipt id")
    receipt = Receipt(receipt_id, OperationId(operation_id), now) if receipt_id else None
    return Settlement(operation_id, status, receipt, consistency, now)


def _token(session: Session) -> str:
    if session.access_token is None:
        raise RuntimeError("a signed-in session holds an access token")
    return session.access_token


def _field(form: FormData, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def _last_lookup(sections: Iterable[Sequence[OperationView]]) -> datetime | None:
    """When the last lookup of a listed operation was recorded: the reconciler's last pass over the
    open operations (or an operator's recorded lookup, whichever came later); None when none has one."""
    notes = (op.last_lookup for rows in sections for op in rows)
    return max((note.looked_up_at for note in notes if note is not None and note.looked_up_at), default=None)
