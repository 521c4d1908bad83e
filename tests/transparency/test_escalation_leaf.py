"""The escalation leaf: its documented fields, a byte-for-byte round trip, refusal of anything the encoder
would not write (both ways where the encoder can be asked), and the auditor's history admitting only an
escalation the review's rule calls for."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from decisionflow.identity import frame
from decisionflow.review_rules import ReviewRule, Stage
from decisionflow.transparency import (
    EscalationLeaf,
    History,
    HistoryError,
    MalformedLeaf,
    decode_leaf,
    encode_leaf,
)
from decisionflow.vocabulary import OperationId
from tests.support.audit_log import sample_proposal

AT = datetime(2026, 12, 4, 8, 30, 0, 123456, tzinfo=UTC)
OPERATION = OperationId("op-v1-" + "ab" * 32)
HEAD = ["decisionflow.audit.leaf.v1", "escalation", "2026-12-04T08:30:00.123456Z", OPERATION]


def test_an_escalation_leaf_is_its_documented_fields_and_round_trips() -> None:
    leaf = EscalationLeaf(AT, OPERATION, 0, ("on-call-leads", "support-managers"))
    data = encode_leaf(leaf)
    assert data == frame([*HEAD, "0", "2", "on-call-leads", "support-managers"])
    assert decode_leaf(data) == leaf


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (["0", "2", "support-managers", "on-call-leads"], "code point order"),
        (["0", "2", "on-call-leads", "on-call-leads"], "code point order"),
        (["0", "0"], "at least one"),
        (["00", "1", "on-call-leads"], "canonical"),
        (["-1", "1", "on-call-leads"], "canonical"),
        (["0", "2", "on-call-leads"], "fewer fields"),
        (["0", "1", "on-call-leads", "extra"], "more fields"),
    ],
)
def test_an_escalation_leaf_no_encoder_writes_is_refused(fields: list[str], message: str) -> None:
    with pytest.raises(MalformedLeaf, match=message):
        decode_leaf(frame([*HEAD, *fields]))
    if message in ("code point order", "at least one"):
        with pytest.raises(ValueError, match="at least one, written in code point order"):
            encode_leaf(EscalationLeaf(AT, OPERATION, 0, tuple(fields[2:])))


RULE = ReviewRule(
    "record_support_review",
    (Stage("leads", ("support-leads",), due=timedelta(hours=4), escalate_to=("on-call-leads",)),),
)
STARTED = dataclasses.replace(sample_proposal("T-1", "Refund the order."), rule=RULE)


def _history_of(hours: int, groups: tuple[str, ...], stage: int = 0) -> None:
    """Read the proposal leaf, then an escalation of stage to groups hours after it started."""
    history = History()
    history.read(0, encode_leaf(STARTED))
    at = STARTED.recorded_at + timedelta(hours=hours)
    history.read(1, encode_leaf(EscalationLeaf(at, STARTED.operation_id, stage, groups)))
    assert history.kinds == {"proposal": 1, "escalation": 1}


def test_the_history_admits_an_escalation_of_a_due_stage_to_its_groups() -> None:
    _history_of(5, ("on-call-leads",))


@pytest.mark.parametrize(
    ("hours", "groups", "stage", "message"),
    [
        (3, ("on-call-leads",), 0, "not due to escalate"),
        (5, ("on-call-leads",), 1, "not due to escalate"),
        (5, ("finance",), 0, "not to the groups its stage names"),
    ],
)
def test_the_history_refuses_an_escalation_the_rule_does_not_call_for(
    hours: int, groups: tuple[str, ...], stage: int, message: str
) -> None:
    with pytest.raises(HistoryError, match=message):
        _history_of(hours, groups, stage)
