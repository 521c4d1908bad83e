"""The auditor's pages (role auditor, or operator, as for ``decisionflow audit export``): one operation's
leaves in the orchestrator's audit log, checked against the log's latest signed checkpoint, and the
same evidence as a bundle to take away.

Both pages build the bundle ``decisionflow audit export --operation`` writes
(``decisionflow.audit_bundle.export_bundle_async``: the latest checkpoint, the operation's leaves with
the log's inclusion proofs at its size, the orchestrator's record). The page then checks it with the
log's verifier key the console is configured with (``--audit-log-key-file``), as ``decisionflow
audit verify`` does, and says one of three things:

    verdict      when                                                   the page says
    verified     the checkpoint opens with the key, and every leaf's    "Verified against checkpoint N",
                 inclusion proof leads to its signed root, decodes and  its origin and the key's name
                 fits the leaves before it                              and id
    unverified   no key is configured                                   NOT verified, and why
    failed       any of those checks does not hold                      FAILED, naming the checkpoint
                                                                        or leaf and the reason

The orchestrator's record (GetOperation) is compared with verified leaves on a line of its own: a
decision recorded after the checkpoint has no leaf yet, which is no fault of the log. The console
decides nothing about who may read the log: the orchestrator refuses anyone but an auditor or
operator (403 here), and an operation without a leaf is its 404.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from datetime import datetime

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from decisionflow.audit_bundle import (
    Bundle,
    BundleRefused,
    ExportRefused,
    dump_bundle,
    export_bundle_async,
    operation_scope,
    stated_size,
    verify_bundle,
)
from decisionflow.client import DecisionflowError, NotFound
from decisionflow.review_rules import rule_digest
from decisionflow.transparency import (
    DecisionLeaf,
    EffectLeaf,
    EscalationLeaf,
    ExpiryLeaf,
    Leaf,
    MalformedLeaf,
    NoteVerifier,
    ProposalLeaf,
    RejectionLeaf,
    RerouteLeaf,
    SettlementLeaf,
    VoteLeaf,
    decode_leaf,
    leaf_hash,
)
from decisionflow_console.access import READ_LOG
from decisionflow_console.marking import revealed
from decisionflow_console.orchestrator import Orchestrator
from decisionflow_console.pages import Pages, utc_text
from decisionflow_console.refusals import explain
from decisionflow_console.review_pages import OPERATION_ID, signed_in, to_sign_in
from decisionflow_console.sessions import Session
from decisionflow_console.words import decision_in_words, state_in_words

ROLE = READ_LOG.role


def trail_path(operation_id: str) -> str:
    """Return the console path of an operation's audit trail."""
    return f"/audit/{operation_id}"


@dataclass(frozen=True, slots=True)
class LeafRow:
    """One leaf as the page lists it: what its bytes say, or that they do not decode."""

    index: int
    kind: str
    recorded_at: datetime | None
    principal: str
    says: str
    body: str
    leaf_hash: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the console's check of the bundle found: verified, unverified (no key) or failed, and where."""

    state: str
    tree_size: int
    origin: str
    key: str = ""
    where: str = ""
    reason: str = ""
    failed_index: int | None = None
    record_finding: str = ""


class AuditPages:
    """The audit log's lookup form, an operation's audit trail, and its bundle, as the signed-in person."""

    def __init__(self, orchestrator: Orchestrator, pages: Pages, log_key: NoteVerifier | None) -> None:
        self._orchestrator = orchestrator
        self._pages = pages
        self._log_key = log_key

    async def lookup(self, request: Request) -> Response:
        """The form that opens an operation's audit trail (and where it sends an id typed into it)."""
        if signed_in(request) is None:
            return to_sign_in(request)
        asked = request.query_params.get("operation_id", "").strip()
        if not asked:
            return self._pages.render(request, "audit_lookup.html", problem="", operation_id="")
        if not OPERATION_ID.fullmatch(asked):
            return self._pages.render(request, "audit_lookup.html", status=400, problem=_NOT_AN_ID, operation_id=asked)
        return RedirectResponse(trail_path(asked), status_code=303)

    async def trail(self, request: Request) -> Response:
        """Show the operation's leaves and whether they hold against the latest signed checkpoint."""
        exported = await self._export(request)
        if isinstance(exported, Response):
            return exported
        verdict = _verdict(exported, self._log_key)
        operation_id = str(exported.scope["operation_id"])
        return self._pages.render(
            request,
            "audit.html",
            operation_id=operation_id,
            verdict=verdict,
            leaves=revealed(tuple(_row(leaf.index, leaf.data) for leaf in exported.leaves)),
            bundle_path=trail_path(operation_id) + "/bundle",
        )

    async def bundle(self, request: Request) -> Response:
        """Send the operation's bundle as a JSON file, as ``decisionflow audit export --operation`` writes it."""
        exported = await self._export(request)
        if isinstance(exported, Response):
            return exported
        # The id matched OPERATION_ID: nothing but [a-z0-9-] reaches the header.
        name = f"{exported.scope['operation_id']}.bundle.json"
        return Response(
            dump_bundle(exported),
            media_type="application/json",
            headers={"content-disposition": f'attachment; filename="{name}"'},
        )

    async def _export(self, request: Request) -> Bundle | Response:
        session = signed_in(request)
        if session is None:
            return to_sign_in(request)
        operation_id = request.path_params["operation_id"]
        if not OPERATION_ID.fullmatch(operation_id):
            return self._pages.message(request, 400, "Not an operation id", _NOT_AN_ID)
        token = _token(session)
        try:
            return await export_bundle_async(
                self._orchestrator.audit(token), self._orchestrator.review(token), operation_scope(operation_id)
            )
        except NotFound as error:
            refusal = explain(error, doing="read the audit log", role=ROLE)
            words = (
                f"The orchestrator's audit log has nothing to show of this operation ({error.message}). An "
                "operation's leaves are in the log once its sequencer has run after the event."
            )
            return self._pages.refusal(request, dataclasses.replace(refusal, title="Not in the audit log", words=words))
        except DecisionflowError as error:
            return self._pages.refusal(request, explain(error, doing="read the audit log", role=ROLE))
        except ExportRefused as refused:
            return self._pages.message(request, 502, "The audit log's checkpoint is not readable", str(refused))


_NOT_AN_ID = "An operation id is op-v1- followed by 64 lowercase hexadecimal digits."


def _verdict(bundle: Bundle, key: NoteVerifier | None) -> Verdict:
    """Check the bundle's leaves with key (the leaves alone decide the verdict), then its record."""
    origin, size = stated_size(bundle.checkpoint, "the log's latest checkpoint")
    if key is None:
        return Verdict("unverified", size, origin)
    shown = f"{key.name}+{key.key_id:08x}"
    try:
        proof = verify_bundle(bundle, key, records=False)
    except BundleRefused as refused:
        return Verdict("failed", size, origin, shown, refused.where, refused.reason, refused.index)
    finding = ""
    try:
        verify_bundle(bundle, key)
    except BundleRefused as refused:
        finding = f"{refused.where}: {refused.reason}"
    return Verdict("verified", proof.tree_size, proof.origin, shown, record_finding=finding)


def _row(index: int, data: str) -> LeafRow:
    raw = base64.b64decode(data)
    digest = leaf_hash(raw).hex()
    try:
        leaf = decode_leaf(raw)
    except MalformedLeaf as error:
        return LeafRow(index, "unreadable", None, "", f"does not decode: {error}", "", digest)
    kind = type(leaf).__name__.removesuffix("Leaf").lower()
    principal, says, body = _said(leaf)
    return LeafRow(index, kind, leaf.recorded_at, principal, says, body, digest)


def _said(leaf: Leaf) -> tuple[str, str, str]:
    """The leaf's principal, what it says in a line, and a proposal's body."""
    match leaf:
        case ProposalLeaf():
            previous = f", from {leaf.previous_operation_id}" if leaf.previous_operation_id else ""
            policy = f"{leaf.policy.name} {leaf.policy.version_label}"
            sources = ", ".join(f"{item.source_id} v{item.version}" for item in leaf.evidence) or "none"
            says = f"{leaf.event}{previous}: case {leaf.case_id}, {leaf.action}; sources {sources}; policy {policy}"
            return leaf.principal, says, leaf.body
        case DecisionLeaf():
            return leaf.principal, decision_in_words(leaf.decision), ""
        case EffectLeaf():
            applied = f", applied {utc_text(leaf.applied_at)}" if leaf.applied_at else ""
            return "", f"receipt {leaf.receipt_id}{applied}", ""
        case RejectionLeaf():
            return "", f"refused by the receiver: {leaf.reason}", ""
        case SettlementLeaf():
            applied = f", applied {utc_text(leaf.applied_at)}" if leaf.applied_at else ""
            settled = state_in_words(leaf.state)
            return leaf.principal, f"settled by a lookup: {settled}, receipt {leaf.receipt_id}{applied}", ""
        case ExpiryLeaf():
            return "", "review expired", ""
        case EscalationLeaf():
            return "", f"stage {leaf.stage_index + 1} escalated to {', '.join(leaf.groups)}", ""
        case RerouteLeaf():
            to = "the default rule" if leaf.rule is None else f"rule {rule_digest(leaf.rule)}"
            return "", f"re-routed to {to}", ""
        case VoteLeaf():
            groups = ", ".join(leaf.groups) or "no groups"
            return (
                leaf.principal,
                f"vote: {decision_in_words(leaf.decision)} in stage {leaf.stage_index + 1} ({groups})",
                "",
            )


def _token(session: Session) -> str:
    if session.access_token is None:
        raise RuntimeError("a signed-in session holds an access token")
    return session.access_token
