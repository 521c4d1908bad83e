"""What each refusal tells a reader (``GUIDE``): the RPCs that may send it and when, in the docs' words; the
command line's advice; the review console's words. Read through ``decisionflow.reasons``.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass

from decisionflow.reasons._declaration import (
    BEYOND_CHECKPOINT,
    CALL_RATE_EXCEEDED,
    CASE_HAS_OPEN_PROPOSAL,
    CHECKPOINT_INTEGRITY,
    CHECKPOINT_SAVE_FAILED,
    CONTENT_BUDGET_EXCEEDED,
    CURRENT_OPERATION_ID,
    DECISION_CONFLICT,
    DECISION_REQUIRED,
    FOUR_EYES,
    IDEMPOTENCY_KEY_REUSED,
    INVALID_ARGUMENT,
    KEY_RETENTION_EXCEEDED,
    NOT_ELIGIBLE_TO_DECIDE,
    NOT_FOUND,
    NOT_REDRIVABLE,
    OPERATION_ID,
    PERMISSION_DENIED,
    REFUSALS,
    REPLY_LOST,
    REVIEW_EXPIRED,
    STALE_PROPOSAL,
    TOO_MANY_OPEN_REVIEWS,
    TOO_MANY_STREAMS,
    UNAUTHENTICATED,
    UNAVAILABLE,
    WATCH_FELL_BEHIND,
    WORKFLOW_PROTOCOL,
    WORKFLOW_VERSION_MISMATCH,
)


@dataclass(frozen=True, slots=True)
class Words:
    """How the review console says a refusal on its page."""

    title: str
    """The page's heading."""
    text: str
    """What happened and what to do; ``{key}`` is the refusal's metadata value under that key (one its
    reason declares), an enum value in words."""
    link: str = ""
    """The metadata key naming the operation whose page the console links to ("": no link)."""
    link_text: str = "Open the proposal"
    """The link's words."""


@dataclass(frozen=True, slots=True)
class Guide:
    """What a refusal tells a reader: of docs/errors.md, of the command line, of the review console."""

    rpcs: str
    """The RPCs that may send it."""
    when: str
    """When a service sends it and what the caller does next, in Markdown; a link to a page is written from
    the repository's root (``[docs/security.md](docs/security.md#roles)``)."""
    advice: str = ""
    """What the ``decisionflow`` commands tell their user to do next, ``{subject}`` naming the operation or
    case ("": the advice for its status)."""
    words: Words | None = None
    """What the review console says (None: the words for the class the client raises it as)."""


# What each refusal tells a reader: the RPCs that may send it, and when and what the caller does next.
GUIDE: Mapping[str, Guide] = {
    INVALID_ARGUMENT: Guide(
        "every RPC",
        when="a field is malformed or out of bounds ([docs/security.md](docs/security.md#input-bounds)), a page token "
        "no response of that listing issued, a listing filter set but empty (ListOperations, ListPendingReviews), the "
        "bytes are not a request message, or the call's metadata is over 16 KiB (field `metadata`, "
        "[docs/security.md](docs/security.md#transport-limits)); nothing was written",
    ),
    DECISION_REQUIRED: Guide(
        "Approve",
        when="Approve with `DECISION_UNSPECIFIED` (the `BadRequest` names the field `decision`): an omitted decision "
        "is not consent",
    ),
    NOT_FOUND: Guide(
        "GetProposal, GetOperation, EditProposal, Approve, SettleOperation, BatchSettleOperations, RedriveOperation, "
        "GetCheckpoint, GetInclusionProof",
        when="no such operation, proposal, pending review or case; the refusal names the one that was missing, an "
        "operation by `operation_id`, a case by `case_id`; for the audit log, no leaf of that operation or case, or no "
        "checkpoint signed at `tree_size`",
    ),
    STALE_PROPOSAL: Guide(
        "StartReview, EditProposal, Approve",
        when="the operation is no longer the case's current proposal (for StartReview: `expected_operation_id` is not "
        "current); show the current one to the reviewer",
        words=Words(
            "This proposal was replaced",
            "This proposal was replaced by {current_operation_id} — open the current one.",
            link=CURRENT_OPERATION_ID,
            link_text="Open the current proposal",
        ),
    ),
    CASE_HAS_OPEN_PROPOSAL: Guide(
        "StartReview",
        when="StartReview of other content while the case's current proposal is undecided; decide or edit it, or "
        "start again naming it as `expected_operation_id` to replace it",
        words=Words(
            "This case has an open proposal",
            "Case {case_id} already has a proposal waiting for review ({current_operation_id}). Open it and edit "
            "it, or decide it first.",
            link=CURRENT_OPERATION_ID,
            link_text="Open the open proposal",
        ),
    ),
    DECISION_CONFLICT: Guide(
        "Approve",
        when="another decision is already recorded; decisions never change",
        words=Words(
            "Already decided",
            "A decision is already recorded for this operation: {recorded_decision}. Decisions cannot be changed.",
            link=OPERATION_ID,
        ),
    ),
    NOT_REDRIVABLE: Guide(
        "RedriveOperation",
        when="only `APPROVED` or `UNKNOWN` operations can be re-driven",
        advice="the operation is already settled; check {subject} with decisionflow status",
        words=Words(
            "Nothing to re-drive",
            "The operation is already settled (state {state}); there is nothing to re-drive.",
            link=OPERATION_ID,
        ),
    ),
    WORKFLOW_VERSION_MISMATCH: Guide(
        "Approve",
        when="the pending review was checkpointed by another workflow graph; an operator runs "
        "`decisionflow-orchestrator reopen-reviews`",
        advice="the review was recorded under another workflow graph; an operator must run "
        "decisionflow-orchestrator reopen-reviews; repeating will not help",
    ),
    IDEMPOTENCY_KEY_REUSED: Guide(
        "Apply",
        when="an effect exists under this key with another payload digest; it is unchanged",
        advice="an effect with another payload exists under this operation id; an operator must look; repeating "
        "will not help",
    ),
    KEY_RETENTION_EXCEEDED: Guide(
        "Apply, RedriveOperation",
        when="the receiver has a key retention, the key is absent, and `first_attempted_at` is older than the "
        "retention less a clock-skew margin "
        "([docs/effect-receiver.md](docs/effect-receiver.md#key-retention-and-pruning)). Definite for this call only "
        "(nothing was written), **not** for the operation: an earlier attempt may have written the effect before its "
        "key was pruned. Never re-drive, escalate: the orchestrator leaves the operation `UNKNOWN`; a replayed "
        "Approve answers outcome Unknown, a RedriveOperation passes the refusal on with the receiver's metadata "
        "(`decisionflow ops redrive` exits 4: escalate)",
        words=Words(
            "Escalate: beyond the receiver's key retention",
            "The receiver refused the re-drive: the first attempt is older than its key retention, so a re-drive "
            "could write a second effect. Nothing was written. Never re-drive this operation; escalate it.",
            link=OPERATION_ID,
        ),
    ),
    CHECKPOINT_INTEGRITY: Guide(
        "Approve",
        when="the checkpoint failed its seal check (tampered, foreign, key no longer listed, columns corrupt) or is "
        "missing, and was not decoded; or it was sealed but names a type outside the workflow's own, and was refused "
        "before any of it ran. It needs an operator, not a retry",
        advice="the stored checkpoint fails its integrity check; an operator must restore the checkpoint key (or the "
        "altered row), else the review must be started again with an edited proposal; repeating will not help",
    ),
    CHECKPOINT_SAVE_FAILED: Guide(
        "StartReview, EditProposal, Approve",
        when="a checkpoint could not be stored; nothing was recorded (the orchestrator checks its saves before it "
        "writes the call's rows or audit leaves), so it is definite, yet the same request may pass: the clients "
        "retry it. After an earlier attempt that may have acted it proves nothing of that one",
        advice="the last attempt recorded nothing (a checkpoint could not be stored); repeat the command as it was",
    ),
    UNAVAILABLE: Guide(
        "every RPC",
        when="the service's database cannot be reached or its disk is full, or the server is shutting down: retry "
        "with the same key. Both services word a database outage alike: `orchestrator database unavailable: the "
        "database cannot answer: it is unreachable, busy or failing over (ERROR); the call may be retried with the "
        "same key after 1.000s` (or `receiver database unavailable: …`), where ERROR is the driver's error class "
        "(`OperationalError`…; its full text, which may name hosts, users and SQL, is only in the server's log), or "
        "`… database unavailable: database or disk is full` (nothing was written; writes succeed again once space "
        "returns, without a restart); either comes with a `RetryInfo` of the delay, which the clients wait at least "
        "before the next attempt. For an OIDC access token, "
        "also: the identity provider's signing keys cannot be fetched (`cannot check the OIDC token: the signing keys "
        "at URL cannot be fetched (…)`; see [docs/security.md](docs/security.md#tokens-from-your-identity-provider))",
    ),
    REPLY_LOST: Guide(
        "Apply (fault tests only)",
        when="the receiver's fault switch: the effect committed and the reply was withheld",
        advice="the effect was committed but its reply lost; check {subject} with decisionflow status",
    ),
    WORKFLOW_PROTOCOL: Guide(
        "StartReview, EditProposal, Approve",
        when="the workflow broke an invariant (for example, a checkpoint re-emitted a request for another operation); "
        "like every `INTERNAL`, indeterminate: settle it by reading the operation",
        advice="a server fault, reported to its log; check {subject} with decisionflow status before repeating, and "
        "tell an operator",
    ),
    UNAUTHENTICATED: Guide(
        "every RPC except health and reflection",
        when="no credentials, an unknown token, a malformed `authorization` header, an unknown certificate",
    ),
    PERMISSION_DENIED: Guide(
        "every RPC except health and reflection",
        when="the principal holds none of the roles the RPC allows ([docs/security.md](docs/security.md#roles)); a "
        "method outside the policy is named by `rpc` alone",
    ),
    FOUR_EYES: Guide(
        "Approve",
        when="the four-eyes rule is on and the reviewer created the proposal or any proposal it was edited from or "
        "replaced",
        advice="the proposal's author cannot decide it; another reviewer must",
        words=Words(
            "You cannot decide your own proposal",
            "The four-eyes rule is on: nobody who created this proposal, or a proposal it was edited from or "
            "replaced, can decide it. Ask another reviewer.",
        ),
    ),
    CALL_RATE_EXCEEDED: Guide(
        "StartReview, EditProposal",
        when="the principal made StartReview and EditProposal calls faster than its rate "
        "(`--author-calls-per-second`, with a burst of `--author-call-burst`), counted in each server process "
        "([docs/operations.md](docs/operations.md#budgets-per-author)); refused before anything ran, so definite, and "
        "the same request passes after the delay",
        advice="nothing was recorded: this author sent proposals faster than its budget allows; repeat the command "
        "after the delay the message names",
    ),
    CONTENT_BUDGET_EXCEEDED: Guide(
        "StartReview, EditProposal",
        when="the principal sent more bytes of proposal text (body, evidence, policy) than its budget per minute "
        "(`--author-content-bytes-per-minute`), counted in each server process; refused before anything ran, so "
        "definite, and the same request passes after the delay",
        advice="nothing was recorded: this author sent more proposal text than its budget allows per minute; repeat "
        "the command after the delay the message names",
    ),
    TOO_MANY_OPEN_REVIEWS: Guide(
        "StartReview, EditProposal",
        when="the call would put one more of the author's proposals in the reviewers' inbox while the author already "
        "has `open_review_limit` there on other cases (`--author-open-reviews`, counted in the database across every "
        "replica); no wait helps until reviewers decide some or an operator expires abandoned ones",
        advice="this author has the most undecided proposals one author may have; repeating will not help until "
        "reviewers decide some (or an operator expires abandoned ones)",
        words=Words(
            "Too many proposals waiting for review",
            "You already have {open_review_limit} proposals waiting for review, the most one author may have. "
            "Nothing was changed. Try again once reviewers have decided some of them.",
        ),
    ),
    REVIEW_EXPIRED: Guide(
        "Approve",
        when="an operator expired the undecided review (`decisionflow-orchestrator expire-reviews`, "
        "[docs/operations.md](docs/operations.md#expiring-abandoned-reviews)); the operation is `EXPIRED` and can no "
        "longer be decided; an edit of it starts a new review",
        advice="an operator expired this review; edit the proposal to ask for a new review; repeating will not help",
        words=Words(
            "This review expired",
            "Nobody decided this proposal in time and an operator expired its review, so it can no longer be "
            "decided. Nothing was recorded. To ask for a review again, edit it.",
            link=OPERATION_ID,
        ),
    ),
    NOT_ELIGIBLE_TO_DECIDE: Guide(
        "Approve",
        when="the review follows a rule ([docs/review-rules.md](docs/review-rules.md)) that does not count this "
        "principal's vote now: an author of the proposal, a principal who decided an earlier stage (the rule counts "
        "one principal in one stage), or one in none of the current stage's groups; nothing was recorded",
        advice="the review's rule does not count your vote on {subject}; a reviewer the current stage admits "
        "must decide it; repeating will not help",
        words=Words(
            "Your vote does not count here",
            "This review follows a rule that does not count your vote now ({vote_refusal}): the current stage is for "
            "reviewers of other groups, or you are an author, or you decided an earlier stage. Nothing was "
            "recorded. Ask a reviewer the current stage admits.",
            link=OPERATION_ID,
        ),
    ),
    BEYOND_CHECKPOINT: Guide(
        "GetCheckpoint, GetInclusionProof, GetConsistencyProof, ListLeaves",
        when="the audit log was asked for a leaf, size or proof beyond its latest signed checkpoint "
        "(`checkpoint_size`) or beyond the tree size asked; ask again once a newer checkpoint covers it "
        "([docs/audit-log.md](docs/audit-log.md))",
        words=Words(
            "Not in a signed checkpoint yet",
            "No checkpoint the audit log signed covers this yet (the latest covers {checkpoint_size} leaves). The "
            "orchestrator signs one within an interval of its sequencer; try again in a moment.",
        ),
    ),
    WATCH_FELL_BEHIND: Guide(
        "WatchEvents",
        when="the watcher read its stream more slowly than events were sequenced, and the server's buffer for it "
        "(`--events-stream-buffer`) filled; nothing is lost: reconnect with `start_index` set to `next_index` "
        "([docs/events.md](docs/events.md#cursors-and-resuming))",
    ),
    TOO_MANY_STREAMS: Guide(
        "WatchEvents",
        when="the principal already holds `stream_limit` WatchEvents streams open on this server process "
        "(`--events-streams-per-principal`); close one, or retry once one has ended",
    ),
}
if GUIDE.keys() != REFUSALS.keys():
    raise ValueError(f"GUIDE and REFUSALS name other reasons: {sorted(GUIDE.keys() ^ REFUSALS.keys())}")


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def _check_advice_and_words() -> None:
    """Advice names only ``{subject}``; words name, and link by, only the metadata keys their reason declares."""
    for reason, guide in GUIDE.items():
        if stray := _fields(guide.advice) - {"subject"}:
            raise ValueError(f"{reason}'s advice names {sorted(stray)}; it may name only {{subject}}")
        if guide.words is None:
            continue
        named = _fields(guide.words.text) | ({guide.words.link} if guide.words.link else set())
        if undeclared := named - set(REFUSALS[reason].metadata):
            raise ValueError(f"{reason}'s words name metadata keys it does not declare: {sorted(undeclared)}")


_check_advice_and_words()
