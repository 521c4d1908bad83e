"""The history checker: a clean history holds, and each planted violation is caught."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import (
    ApproveResult,
    Consistency,
    Decision,
    DecisionConflict,
    EffectRecord,
    LookupAnswer,
    LookupStatus,
    OperationState,
    OperationView,
    Outcome,
    Receipt,
    Unavailable,
)
from decisionflow.vocabulary import OperationId
from tests.campaigns.history import CheckResult, Event, EventType, History, check, load

OK_OP, DECLINED_OP, LOST_OP, REFUSED_OP = ("op-v1-" + c * 64 for c in "abcd")
CASE = "T-1042"
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _event(kind: EventType, call: str, op: str, outcome: str = "", decision: str = "", receipt: str = "") -> Event:
    return Event(kind, "client", call, op, CASE, 0.0, outcome=outcome, decision=decision, receipt=receipt)


def _history() -> list[Event]:
    """Approved and told COMMITTED; declined; approved with the reply lost; approved but refused as stale."""
    return [
        _event("invoke", "approve", OK_OP),
        _event("ok", "approve", OK_OP, outcome="COMMITTED", decision="APPROVE", receipt="rcpt-1"),
        _event("invoke", "decline", OK_OP),
        _event("fail", "decline", OK_OP, outcome="DECISION_CONFLICT", decision="APPROVE"),
        _event("invoke", "decline", DECLINED_OP),
        _event("ok", "decline", DECLINED_OP, outcome="DECLINED", decision="DECLINE"),
        _event("invoke", "approve", LOST_OP),
        _event("info", "approve", LOST_OP, outcome="UNAVAILABLE"),
        _event("invoke", "approve", REFUSED_OP),
        _event("fail", "approve", REFUSED_OP, outcome="STALE_PROPOSAL"),
    ]


def _effect(op: str, receipt: str) -> EffectRecord:
    return EffectRecord(
        op, CASE, "record_support_review", "0" * 64, Receipt(receipt, OperationId(op), NOW), "rita", "body"
    )


def _lookups(
    effects: list[EffectRecord], ops: tuple[str, ...] = (OK_OP, DECLINED_OP, LOST_OP, REFUSED_OP)
) -> dict[str, LookupAnswer]:
    stored = {e.operation_id: e.receipt for e in effects}
    return {
        op: LookupAnswer(
            op,
            LookupStatus.APPLIED if op in stored else LookupStatus.NOT_FOUND,
            stored.get(op),
            Consistency.STRONG,
            NOW,
        )
        for op in ops
    }


EFFECTS = [_effect(OK_OP, "rcpt-1"), _effect(LOST_OP, "rcpt-2")]
DECISIONS = {OK_OP: Decision.APPROVE, DECLINED_OP: Decision.DECLINE, LOST_OP: Decision.APPROVE}


def _run(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision] | None = None) -> CheckResult:
    return check(events, effects, _lookups(effects), DECISIONS if decisions is None else decisions)


def test_a_clean_history_holds() -> None:
    result = _run(_history(), EFFECTS)
    assert result.holds, result.explain()
    assert result.operations == 4 and result.calls == {"ok": 2, "fail": 2, "info": 1}
    # An indeterminate approval may also have written nothing.
    assert _run(_history(), EFFECTS[:1]).holds


Plant = Callable[[list[Event], list[EffectRecord], dict[str, Decision]], None]


def _duplicate(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    effects.append(_effect(OK_OP, "rcpt-9"))


def _committed_without_effect(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    effects.remove(EFFECTS[0])


def _refused_with_effect(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    effects.append(_effect(REFUSED_OP, "rcpt-3"))


def _declined_with_effect(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    effects.append(_effect(DECLINED_OP, "rcpt-4"))


def _other_receipt(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    effects[0] = replace(effects[0], receipt=Receipt("rcpt-other", OperationId(OK_OP), NOW))


def _phantom_effect(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    effects.append(_effect("op-v1-" + "e" * 64, "rcpt-5"))


def _decision_lost(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    del decisions[DECLINED_OP]


def _decision_changed(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    decisions[OK_OP] = Decision.DECLINE


def _told_two_decisions(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    events.append(_event("ok", "decline", OK_OP, outcome="DECLINED", decision="DECLINE"))


def _answer_of_another_call(events: list[Event], effects: list[EffectRecord], decisions: dict[str, Decision]) -> None:
    events.append(_event("ok", "decline", OK_OP, outcome="COMMITTED", decision="DECLINE"))


@pytest.mark.parametrize(
    ("plant", "found"),
    [
        (_duplicate, "2 effects for one operation id"),
        (_committed_without_effect, "approval answered COMMITTED but 0 effects"),
        (_refused_with_effect, "only refused approvals, yet 1 effects"),
        (_declined_with_effect, "declined (as clients were told) but 1 effects"),
        (_other_receipt, "clients were told receipts ['rcpt-1'], the effect has rcpt-other"),
        (_phantom_effect, "an effect for an operation no client ever named"),
        (_decision_lost, "a client was told DECLINE, but no decision is recorded"),
        (_decision_changed, "a client was told APPROVE, but DECLINE is recorded"),
        (_told_two_decisions, "clients were told different decisions"),
        (_answer_of_another_call, "a decline was answered COMMITTED"),
    ],
)
def test_a_planted_violation_is_caught(plant: Plant, found: str) -> None:
    events, effects, decisions = _history(), list(EFFECTS), dict(DECISIONS)
    plant(events, effects, decisions)
    result = _run(events, effects, decisions)
    assert not result.holds
    assert any(found in violation for violation in result.violations), result.explain()


def test_lookup_must_agree_with_the_stored_effects() -> None:
    lookups = _lookups(EFFECTS)
    lookups[LOST_OP] = replace(lookups[LOST_OP], status=LookupStatus.NOT_FOUND, receipt=None)
    result = check(_history(), EFFECTS, lookups, DECISIONS)
    assert [v for v in result.violations if "Lookup says NOT_FOUND, ListEffects has 1" in v]


def test_counts_duplicates_and_lost_decisions_for_the_report() -> None:
    decisions = dict(DECISIONS)
    del decisions[OK_OP]
    result = _run(_history(), [*EFFECTS, _effect(LOST_OP, "rcpt-8")], decisions)
    assert (result.duplicates, result.decisions_lost) == (1, 1)


def test_recorder_writes_one_completion_per_invocation(tmp_path: Path) -> None:
    history = History(tmp_path / "history.jsonl")
    with history.call("c1", "approve", OK_OP, CASE) as done:
        done.finish("ok", outcome="COMMITTED", decision="APPROVE", receipt="rcpt-1")
    with pytest.raises(Unavailable), history.call("c1", "approve", LOST_OP, CASE):
        raise Unavailable(grpc.StatusCode.UNAVAILABLE, "reply lost")
    with pytest.raises(DecisionConflict), history.call("c2", "decline", OK_OP, CASE):
        raise DecisionConflict(
            grpc.StatusCode.ALREADY_EXISTS,
            "decided",
            reason=reasons.DECISION_CONFLICT,
            metadata={reasons.RECORDED_DECISION: "approve"},
        )
    history.close()
    events = load(tmp_path / "history.jsonl")
    assert [(e.type, e.call) for e in events] == [
        ("invoke", "approve"),
        ("ok", "approve"),
        ("invoke", "approve"),
        ("info", "approve"),
        ("invoke", "decline"),
        ("fail", "decline"),
    ]
    assert events[-1].decision == "APPROVE" and events[-1].outcome == "DECISION_CONFLICT"
    assert check(events, [_effect(OK_OP, "rcpt-1")], _lookups([_effect(OK_OP, "rcpt-1")], (OK_OP, LOST_OP))).holds


def _answer(op: str, decision: Decision, outcome: Outcome) -> ApproveResult:
    state = OperationState.COMMITTED if outcome is Outcome.COMMITTED else OperationState.DECLINED
    receipt = Receipt("rcpt-1", OperationId(op), NOW) if outcome is Outcome.COMMITTED else None
    operation = OperationView(op, CASE, state, decision, "rita", NOW, receipt, 1, NOW, "", None, NOW)
    return ApproveResult(outcome, False, operation)


@pytest.mark.parametrize(
    "answer",
    [_answer(OK_OP, Decision.DECLINE, Outcome.COMMITTED), _answer(DECLINED_OP, Decision.APPROVE, Outcome.COMMITTED)],
    ids=["another decision", "another operation"],
)
def test_an_answer_carrying_another_decision_or_operation_is_a_violation(tmp_path: Path, answer: ApproveResult) -> None:
    # What the client reads is the answer's operation: an Approve told COMMITTED whose operation says
    # DECLINE (or is another operation) told the client something that was not recorded.
    history = History(tmp_path / "history.jsonl")
    with history.call("c1", "approve", OK_OP, CASE) as done:
        done.answered(answer)
    history.close()
    effects = [_effect(OK_OP, "rcpt-1")]
    result = check(load(tmp_path / "history.jsonl"), effects, _lookups(effects, (OK_OP,)), {OK_OP: Decision.APPROVE})
    assert not result.holds and result.decisions_changed == 1
    # The answer as it should be holds.
    history = History(tmp_path / "good.jsonl")
    with history.call("c1", "approve", OK_OP, CASE) as done:
        done.answered(_answer(OK_OP, Decision.APPROVE, Outcome.COMMITTED))
    history.close()
    assert check(load(tmp_path / "good.jsonl"), effects, _lookups(effects, (OK_OP,)), {OK_OP: Decision.APPROVE}).holds
