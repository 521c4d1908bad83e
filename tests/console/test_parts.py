"""The console's parts without a browser: sessions, CSRF, the proposal diff, forms, the words for each
refusal, and its settings."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import (
    Consistency,
    Decision,
    EvidenceItem,
    LookupNote,
    LookupStatus,
    OperationState,
    OperationView,
    PolicyRef,
    ProposalView,
)
from decisionflow.client.errors import error_class
from decisionflow_console import csrf
from decisionflow_console.config import load, public_url
from decisionflow_console.diff import proposal_diff
from decisionflow_console.forms import FormError, ProposalForm
from decisionflow_console.marking import reveal
from decisionflow_console.operator_pages import _last_lookup
from decisionflow_console.pages import Pages
from decisionflow_console.refusals import explain
from decisionflow_console.review_pages import proposal_page
from decisionflow_console.sessions import Person, SessionStore
from decisionflow_console.signin import local_path

KEY = b"k" * 32
ANA = Person("ana", "Ana", ("reviewers",))


class Clock:
    """A settable wall clock."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_signed_in_session_gets_a_new_id_and_ends_with_its_token() -> None:
    clock = Clock()
    store = SessionStore(KEY, lifetime_seconds=3600, clock=clock)
    earlier = store.sign_in(ANA, "token-0", token_expires_at=None)
    signed_in = store.sign_in(ANA, "token-1", token_expires_at=clock.now + 60)
    assert signed_in.session_id != earlier.session_id  # no fixation: each sign-in gets a new id
    cookie = store.cookie_value(signed_in)
    assert store.find(cookie) is signed_in and signed_in.signed_in
    clock.now += 59
    assert store.find(cookie) is signed_in
    clock.now += 1  # the access token's expiry, sooner than the lifetime
    assert store.find(cookie) is None


def test_a_session_ends_at_its_lifetime_sign_out_or_a_bad_signature() -> None:
    clock = Clock()
    store = SessionStore(KEY, lifetime_seconds=100, clock=clock)
    session = store.sign_in(ANA, "token", token_expires_at=None)
    cookie = store.cookie_value(session)
    session_id, _, signature = cookie.rpartition(".")
    assert store.find(f"{session_id}.{signature[::-1]}") is None
    assert store.find(session_id) is None
    assert SessionStore(b"other" * 8, 100, clock=clock).find(cookie) is None
    clock.now += 99
    assert store.find(cookie) is session
    store.end(session)
    assert store.find(cookie) is None and session.access_token is None


def test_csrf_accepts_only_the_sessions_token() -> None:
    store = SessionStore(KEY, 100)
    session = store.sign_in(ANA, "token", token_expires_at=None)
    assert csrf.check(session, session.csrf_token) is session
    for submitted in (None, "", "x", session.csrf_token + "x", b"bytes"):
        with pytest.raises(csrf.CsrfRefused):
            csrf.check(session, submitted)
    with pytest.raises(csrf.CsrfRefused):
        csrf.check(None, session.csrf_token)


def _proposal(body: str, hold: int, allowance: int = 0, op: str = "op-v1-b") -> ProposalView:
    return ProposalView(
        operation_id=op,
        case_id="T-1",
        action="record_support_review",
        body=body,
        evidence=(EvidenceItem("HOLD-7", hold, "may hold"), EvidenceItem("KB-12", 1, "update")),
        evidence_id="ev",
        policy=PolicyRef("support-replies", "2026-10", allowance),
        policy_id="pol",
        human_edited=True,
        parent_operation_id="op-v1-a",
        created_by="ana",
        created_at=None,
        current=True,
    )


def test_the_diff_shows_body_lines_and_the_changes_text_does_not() -> None:
    parent = _proposal("one\ntwo\n", hold=2, op="op-v1-a")
    same_text = proposal_diff(parent, _proposal("one\ntwo\n", hold=3, allowance=5))
    assert not same_text.body_changed
    assert same_text.evidence_changes == ("HOLD-7: version 2 → 3",)
    assert same_text.policy_changes == ("allowance 0 → 5 units",)
    edited = proposal_diff(parent, _proposal("one\n2\n", hold=2))
    assert [line for line in edited.body_lines if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        "-two",
        "+2",
    ]
    assert edited.evidence_changes == () and edited.policy_changes == ()


def test_forms_round_trip_and_refuse_what_is_not_a_number() -> None:
    proposal = _proposal("body", hold=2)
    form = ProposalForm.of(proposal)
    posted = {"case_id": "T-1", "body": "body", "policy_name": "support-replies", "policy_version_label": "2026-10"}
    posted["policy_allowance_units"] = "0"
    for index, row in enumerate(form.evidence):
        posted |= {
            f"evidence-{index}-source_id": row.source_id,
            f"evidence-{index}-version": row.version,
            f"evidence-{index}-quotation": row.quotation,
        }
    again = ProposalForm.posted(posted)
    assert tuple(again.evidence_items()) == proposal.evidence
    assert again.policy() == proposal.policy
    with pytest.raises(FormError, match="evidence row 1: version"):
        ProposalForm.posted({**posted, "evidence-0-version": "²"}).evidence_items()
    with pytest.raises(FormError, match="line 1"):
        ProposalForm.posted({**posted, "policy_rules": "no equals sign"}).policy()


@pytest.mark.parametrize(
    ("code", "reason", "metadata", "status", "words"),
    [
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.STALE_PROPOSAL,
            {reasons.CURRENT_OPERATION_ID: "op-v1-new"},
            409,
            "replaced by op-v1-new — open the current one",
        ),
        (
            grpc.StatusCode.ALREADY_EXISTS,
            reasons.DECISION_CONFLICT,
            {reasons.RECORDED_DECISION: "DECISION_DECLINE"},
            409,
            "already recorded for this operation: decline",
        ),
        (grpc.StatusCode.PERMISSION_DENIED, reasons.FOUR_EYES, {}, 403, "four-eyes rule"),
        (grpc.StatusCode.FAILED_PRECONDITION, reasons.REVIEW_EXPIRED, {}, 409, "an operator expired its review"),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            reasons.TOO_MANY_OPEN_REVIEWS,
            {reasons.OPEN_REVIEW_LIMIT: "25"},
            409,
            "You already have 25 proposals waiting for review",
        ),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, reasons.CALL_RATE_EXCEEDED, {}, 429, "Nothing was changed. Try again"),
        (grpc.StatusCode.PERMISSION_DENIED, "", {}, 403, "does not have the reviewer role"),
        (grpc.StatusCode.UNAUTHENTICATED, "", {}, 401, "Sign in again"),
        (grpc.StatusCode.UNAVAILABLE, "", {}, 503, "may or may not have been recorded"),
        (grpc.StatusCode.NOT_FOUND, "", {}, 404, "no such operation"),
        (grpc.StatusCode.INTERNAL, "", {}, 502, "message"),
    ],
)
def test_each_refusal_has_its_words(
    code: grpc.StatusCode, reason: str, metadata: dict[str, str], status: int, words: str
) -> None:
    error = error_class(code, reason)(code, "message", reason=reason, metadata=metadata)
    refusal = explain(error, doing="approve this proposal", role="reviewer", deciding=True)
    assert refusal.status == status
    assert words in refusal.words
    if reason == reasons.STALE_PROPOSAL:
        assert refusal.link is not None and refusal.link.href == "/proposals/op-v1-new"


def test_settings_refuse_what_would_be_unsafe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert public_url("https://review.example.com/") == "https://review.example.com"
    assert public_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    for refused in ("http://review.example.com", "https://review.example.com/console", "ftp://x"):
        with pytest.raises(ValueError):
            public_url(refused)
    key = tmp_path / "key"
    key.write_text("short")
    base = ["--oidc-issuer", "https://id.example.com", "--oidc-client-id", "console", "--session-key-file", str(key)]
    with pytest.raises(SystemExit) as exit_info:
        load(base, {})
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "at least 32 bytes" in error and "short" not in error
    key.write_text("k" * 32)
    with pytest.raises(SystemExit):
        load([*base, "--address", "0.0.0.0:8080"], {})
    assert "--public-url" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        load([*base, "--oidc-scopes", "profile"], {})
    assert "openid" in capsys.readouterr().err
    config = load(base, {"DECISIONFLOW_CONSOLE_SESSION_LIFETIME_SECONDS": "60"})
    assert config.session_key == b"k" * 32 and config.session_lifetime_seconds == 60
    assert "k" * 32 not in repr(config)
    assert config.origin(8123) == "http://127.0.0.1:8123"


def test_after_sign_in_only_alocal_path_is_followed() -> None:
    assert local_path("/proposals/op-v1-a") == "/proposals/op-v1-a"
    for elsewhere in (None, "", "https://evil.example", "//evil.example/x", "/\\evil.example", "proposals"):
        assert local_path(elsewhere) == "/"


def test_reveal_escapes_and_shows_invisible_characters() -> None:
    shown = reveal("<b>a</b>\u202egnp.exe\u200b&")
    assert str(shown) == (
        "&lt;b&gt;a&lt;/b&gt;"
        '<span class="hidden-char" role="img" aria-label="{0}" title="{0}">⟦U+202E⟧</span>gnp.exe'
        '<span class="hidden-char" role="img" aria-label="{1}" title="{1}">⟦U+200B⟧</span>&amp;'
    ).format(
        "invisible format character U+202E (right-to-left override)",
        "invisible format character U+200B (zero width space)",
    )
    assert str(reveal("plain שלום")) == "plain שלום"


def test_the_desk_names_the_last_lookup_recorded_on_its_operations() -> None:
    def operation(looked_up_at: datetime | None) -> OperationView:
        note = None
        if looked_up_at is not None:
            note = LookupNote(looked_up_at, LookupStatus.NOT_FOUND, Consistency.STRONG, "")
        return OperationView(
            "op-v1-" + "a" * 64,
            "T-1",
            OperationState.UNKNOWN,
            Decision.APPROVE,
            "rita",
            None,
            None,
            1,
            None,
            "",
            note,
            None,
        )

    earlier, later = datetime(2026, 12, 1, 9, 0, tzinfo=UTC), datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert _last_lookup([[operation(None)], []]) is None
    assert _last_lookup([[operation(earlier), operation(None)], [operation(later)]]) == later


OPERATION_SHOWN = OperationView(
    "op-v1-b", "T-1", OperationState.PENDING_REVIEW, Decision.UNSPECIFIED, "", None, None, 0, None, "", None, None
)


def test_the_body_diff_marks_the_words_that_changed_within_a_line() -> None:
    parent = _proposal("Please update to 4.2.1 today.\nThanks.\n", hold=2, op="op-v1-a")
    changed = proposal_diff(parent, _proposal("Please update to 4.2.2 today.\nThanks.\nBye.\n", hold=2))
    lines = [(line.mark, [(s.text, s.changed) for s in line.segments]) for line in changed.word_lines]
    assert ("-", [("Please update to ", False), ("4.2.1", True), (" today.", False)]) in lines
    assert ("+", [("Please update to ", False), ("4.2.2", True), (" today.", False)]) in lines
    assert ("+", [("Bye.", True)]) in lines and (" ", [("Thanks.", False)]) in lines
    page = Pages().html(
        "proposal.html", person=None, csrf_token="t", **proposal_page(_proposal("x", 2), OPERATION_SHOWN, changed)
    )
    assert "<del>4.2.1</del>" in page and "<ins>4.2.2</ins>" in page and "<ins>Bye.</ins>" in page
