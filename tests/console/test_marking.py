"""Every string a reviewer is shown from a proposal goes through one marking: each field of the
proposal view and of its operation (found by walking the views' own dataclasses, not a list kept by
hand) is injected with invisible characters, and the rendered page shows each one marked and none raw."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import pytest

from decisionflow.client import Decision, EvidenceItem, OperationState, OperationView, PolicyRef, ProposalView
from decisionflow_console.diff import proposal_diff
from decisionflow_console.pages import Pages
from decisionflow_console.review_pages import proposal_page

HIDDEN = ("\u200b", "\u202e", "\u2066", "\ufeff")
AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def view(op: str, rules: Mapping[str, str], parent: str = "") -> ProposalView:
    return ProposalView(
        operation_id=op,
        case_id="T-1",
        action="record_support_review",
        body="Please update to 4.2.1.\nThen restart.",
        evidence=(EvidenceItem("HOLD-7", 2, "may hold"), EvidenceItem("KB-12", 1, "update")),
        evidence_id="ev-v1-1",
        policy=PolicyRef("support-replies", "2026-10", 9, rules),
        policy_id="pol-v1-1",
        human_edited=bool(parent),
        parent_operation_id=parent,
        created_by="ana@example.com",
        created_at=AT,
        current=True,
    )


OPERATION = OperationView(
    "op-v1-b", "T-1", OperationState.PENDING_REVIEW, Decision.UNSPECIFIED, "", None, None, 0, None, "", None, AT
)
Edit = Callable[[Any, str], Any]


def _set_string(_old: Any, new: str) -> Any:
    return new


def _in_field(name: str, edit: Edit) -> Edit:
    return lambda record, new: dataclasses.replace(record, **{name: edit(getattr(record, name), new)})


def _in_item(index: int, edit: Edit) -> Edit:
    return lambda items, new: (*items[:index], edit(items[index], new), *items[index + 1 :])


def _as_key(key: str) -> Edit:
    return lambda mapping, new: {(new if k == key else k): v for k, v in mapping.items()}


def _as_value(key: str) -> Edit:
    return lambda mapping, new: {**mapping, key: new}


def string_fields(value: Any, path: str = "") -> Iterator[tuple[str, Edit]]:
    """Every string inside value, with a function that returns value with that string replaced (an enum
    of strings, such as a state, is the console's own word, not text)."""
    if isinstance(value, Enum):
        return
    if isinstance(value, str):
        yield path, _set_string
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            for inner, edit in string_fields(getattr(value, f.name), f"{path}.{f.name}"):
                yield inner, _in_field(f.name, edit)
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            for inner, edit in string_fields(item, f"{path}[{i}]"):
                yield inner, _in_item(i, edit)
    elif isinstance(value, Mapping):
        for key in value:
            yield f"{path}{{key {key}}}", _as_key(key)
            yield f"{path}[{key}]", _as_value(key)


PARENT = view("op-v1-a", {"max_refund_eur": "0001", "tone": "plain"})
PROPOSAL = view("op-v1-b", {"max_refund_eur": "0002", "tone": "plain"}, parent="op-v1-a")
FIELDS = [
    *[(f"proposal{path}", "proposal", edit) for path, edit in string_fields(PROPOSAL)],
    *[(f"parent{path}", "parent", edit) for path, edit in string_fields(PARENT)],
    *[(f"operation{path}", "operation", edit) for path, edit in string_fields(OPERATION)],
]


def test_the_walk_finds_every_field_a_proposal_shows() -> None:
    paths = {path for path, _, _ in FIELDS}
    for wanted in ("proposal.body", "proposal.created_by", "operation.reviewer", "proposal.policy.name",
                   "proposal.policy.version_label",
                   "proposal.policy.rules[tone]", "proposal.policy.rules{key tone}", "proposal.evidence[0].quotation",
                   "parent.policy.rules[max_refund_eur]", "parent.body"):  # fmt: skip
        assert wanted in paths


@pytest.mark.parametrize(("path", "which", "edit"), FIELDS, ids=[path for path, _, _ in FIELDS])
def test_each_field_shown_from_a_proposal_marks_its_invisible_characters(path: str, which: str, edit: Edit) -> None:
    for n, hidden in enumerate(HIDDEN):
        sentinel = f"SENTINEL{n}"
        shown: dict[str, Any] = {"proposal": PROPOSAL, "parent": PARENT, "operation": OPERATION}
        shown[which] = edit(shown[which], f"x{hidden}{sentinel}")
        proposal, parent = shown["proposal"], shown["parent"]
        page = Pages().html(
            "proposal.html",
            person=None,
            csrf_token="t",
            **proposal_page(proposal, shown["operation"], proposal_diff(parent, proposal)),
        )
        assert hidden not in page, f"{path}: {hidden!r} shown raw"
        if sentinel in page:
            assert f"⟦U+{ord(hidden):04X}⟧</span>{sentinel}" in page, f"{path}: not marked"


def test_a_policy_edited_behind_invisible_characters_shows_them_and_each_rule_old_to_new() -> None:
    parent = view("op-v1-a", {"max_refund_eur": "\u202e0001"})
    parent = dataclasses.replace(
        parent, policy=PolicyRef("support\u200b-replies", "\u202e01-6202", 9, parent.policy.rules)
    )
    edited = dataclasses.replace(parent.policy, rules={"max_refund_eur": "\u202e0002"})
    proposal = dataclasses.replace(parent, operation_id="op-v1-b", parent_operation_id="op-v1-a", policy=edited)
    page = Pages().html(
        "proposal.html",
        person=None,
        csrf_token="t",
        **proposal_page(proposal, OPERATION, proposal_diff(parent, proposal)),
    )
    shown = re.sub(r'<span class="hidden-char"[^>]*>', "", page)
    assert "support⟦U+200B⟧</span>-replies" in shown
    assert "max_refund_eur: ⟦U+202E⟧</span>0001 → " in shown
    assert "rules changed" not in page
