"""The one declaration of refusals (decisionflow.reasons): the servers' status tables follow from it, a
refusal carries only the metadata its reason declares, and what disagrees with it fails where it is
made (a misdeclared reason, words for an error nobody raises, a generated table edited by hand)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons
from decisionflow.client import DecisionflowError
from decisionflow.client.errors import error_class
from decisionflow.reasons import _declaration as reasons_declaration
from decisionflow.reasons import _guide as reasons_guide
from decisionflow_cli.review._output import advice
from decisionflow_console import refusals as console_refusals
from decisionflow_console.refusals import explain
from decisionflow_server.foundation.errors import DomainError
from decisionflow_server.runtime.rpc_errors import code_for, status_table
from effect_receiver import errors as receiver_errors
from effect_receiver.grpc_api import STATUS_TABLE as RECEIVER_STATUS
from orchestrator import errors as orchestrator_errors
from orchestrator.grpc_api import STATUS_TABLE as ORCHESTRATOR_STATUS
from tools import gen_refusals

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("table", [ORCHESTRATOR_STATUS, RECEIVER_STATUS], ids=["orchestrator", "receiver"])
def test_each_server_answers_a_refusal_with_the_status_its_reason_is_declared_with(
    table: dict[type[DomainError], grpc.StatusCode],
) -> None:
    assert table
    for cls, code in table.items():
        assert code.name == reasons.refusal(cls.reason).status, cls.__name__


def test_every_refusal_a_service_defines_is_in_its_table() -> None:
    own = [
        (ORCHESTRATOR_STATUS, orchestrator_errors.ReviewExpired, grpc.StatusCode.FAILED_PRECONDITION),
        (ORCHESTRATOR_STATUS, orchestrator_errors.CallRateExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ORCHESTRATOR_STATUS, orchestrator_errors.CheckpointIntegrity, grpc.StatusCode.DATA_LOSS),
        (RECEIVER_STATUS, receiver_errors.IdempotencyKeyReused, grpc.StatusCode.FAILED_PRECONDITION),
        (RECEIVER_STATUS, receiver_errors.ReplyLost, grpc.StatusCode.UNAVAILABLE),
    ]
    for table, cls, code in own:
        assert table[cls] is code, cls.__name__
    # The bases carry no reason, so they answer nothing of their own: raised bare, they are server faults.
    assert orchestrator_errors.OrchestratorError not in ORCHESTRATOR_STATUS
    assert code_for(ORCHESTRATOR_STATUS, orchestrator_errors.OrchestratorError("bare")) is grpc.StatusCode.INTERNAL


def test_a_domain_error_whose_reason_nobody_declared_fails_its_table() -> None:
    class Undeclared(DomainError):
        reason = "NOT_DECLARED_ANYWHERE"

    with pytest.raises(LookupError, match="NOT_DECLARED_ANYWHERE"):
        status_table(Undeclared)


def test_a_refusal_carries_only_the_metadata_keys_its_reason_declares() -> None:
    class Stale(DomainError):
        reason = reasons.STALE_PROPOSAL

    stale = Stale("stale", metadata={reasons.OPERATION_ID: "op", reasons.CURRENT_OPERATION_ID: "op2"})
    assert stale.metadata == {reasons.OPERATION_ID: "op", reasons.CURRENT_OPERATION_ID: "op2"}
    with pytest.raises(ValueError, match=r"STALE_PROPOSAL declares no metadata keys \['principal'\]"):
        Stale("stale", metadata={reasons.OPERATION_ID: "op", reasons.PRINCIPAL: "ava"})


def test_a_reason_is_declared_once_with_its_constant_and_keys_declared_before_it() -> None:
    stale = reasons.refusal(reasons.STALE_PROPOSAL)
    with pytest.raises(ValueError, match="'STALE_PROPOSAL' is declared twice"):
        reasons_declaration._declared(stale, stale)
    with pytest.raises(ValueError, match="'PAINTED' is declared twice, or without a constant"):
        reasons_declaration._declared(reasons.Refusal("PAINTED", "FAILED_PRECONDITION", True, ()))
    with pytest.raises(ValueError, match=r"STALE_PROPOSAL names metadata keys that are not declared: \['colour'\]"):
        reasons_declaration._declared(reasons.Refusal(reasons.STALE_PROPOSAL, "FAILED_PRECONDITION", True, ("colour",)))
    with pytest.raises(LookupError, match="PAINTED"):
        reasons.refusal("PAINTED")


def test_the_console_has_words_only_for_errors_a_declared_refusal_arrives_as(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Stray(DecisionflowError):
        """Raised for no declared refusal."""

    words = functools.singledispatch(console_refusals._words.registry[object])
    words.register(Stray, console_refusals._words.registry[object])
    monkeypatch.setattr(console_refusals, "_words", words)

    with pytest.raises(TypeError, match="words for Stray"):
        console_refusals._check_against_the_declaration()


def test_a_generated_table_edited_by_hand_is_written_again() -> None:
    path = "docs/errors.md"
    current = (ROOT / path).read_text(encoding="utf-8")
    edited = current.replace("| `STALE_PROPOSAL` | `FAILED_PRECONDITION` |", "| `STALE_PROPOSAL` | `ABORTED` |")
    assert edited != current

    assert gen_refusals.render(path, edited) == current


def test_advice_and_words_name_only_what_their_reason_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    stale = reasons.GUIDE[reasons.STALE_PROPOSAL]
    for guide, named in [
        (dataclasses.replace(stale, advice="check {operation_id}"), r"advice names \['operation_id'\]"),
        (
            dataclasses.replace(stale, words=reasons.Words("Stale", "by {principal}")),
            r"words name metadata keys it does not declare: \['principal'\]",
        ),
        (
            dataclasses.replace(stale, words=reasons.Words("Stale", "replaced", link=reasons.CASE_ID)),
            r"does not declare: \['case_id'\]",
        ),
    ]:
        monkeypatch.setattr(reasons_guide, "GUIDE", {**reasons.GUIDE, reasons.STALE_PROPOSAL: guide})
        with pytest.raises(ValueError, match=named):
            reasons_guide._check_advice_and_words()


def test_the_command_line_and_the_console_say_a_refusal_as_its_declaration_does() -> None:
    for reason, guide in reasons.GUIDE.items():
        code = grpc.StatusCode[reasons.refusal(reason).status]
        metadata = dict.fromkeys(reasons.refusal(reason).metadata, "op-v1-x")
        error = error_class(code, reason)(code, "message", reason=reason, metadata=metadata)
        if guide.advice:
            assert advice(error, "op-v1-x") == guide.advice.format(subject="op-v1-x"), reason
        if guide.words is not None:
            said = explain(error, doing="approve this proposal", role="reviewer")
            assert (said.title, said.words) == (guide.words.title, guide.words.text.format_map(metadata)), reason
            assert (said.link is not None) is bool(guide.words.link), reason
