"""Sealed checkpoints are decoded by a restricted unpickler; corrupt columns are refused as integrity failures."""

from __future__ import annotations

import builtins
import importlib
import io
import os
import pickle
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from agent_framework._workflows._runner_context import MessageType

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import review_pb2
from decisionflow.vocabulary import OperationId
from decisionflow_server.storage import db
from orchestrator.checkpoints import CHECKPOINT_CLASSES, CheckpointSealer, decode_state
from orchestrator.domain import SealedCheckpoint
from orchestrator.errors import CheckpointIntegrity
from orchestrator.store._rows import sealed_checkpoint_from
from tests.support.stack import CHECKPOINT_KEY, Stack, approve, decline, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow


class _System:
    """Unpickling this runs a shell command that creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


class _Exec:
    """Unpickling this runs Python source that creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


class _Popen:
    """Unpickling this starts a process that creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[list[str]]]:
        return (subprocess.Popen, (["touch", str(self.marker)],))


class _EnumSpellingPickler(pickle.Pickler):
    """Pickles enum members one way, whatever this Python's own spelling is.

    ``by_name`` is how Python 3.11.0-3.11.4 do it, ``builtins.getattr(Class, "NAME")``; otherwise
    ``Class(value)``, as 3.11.7 and 3.12+ do.
    """

    def __init__(self, buffer: io.BytesIO, *, by_name: bool) -> None:
        super().__init__(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        self.by_name = by_name

    def reducer_override(self, obj: object) -> Any:
        if isinstance(obj, Enum):
            return (getattr, (type(obj), obj.name)) if self.by_name else (type(obj), (obj.value,))
        return NotImplemented


def _pickled(state: object, *, enums_by_name: bool) -> bytes:
    buffer = io.BytesIO()
    _EnumSpellingPickler(buffer, by_name=enums_by_name).dump(state)
    pickled = buffer.getvalue()
    assert (b"getattr" in pickled) is enums_by_name  # the spelling asked for, really
    return pickled


def _rows(url: str, statement: str, **params: object) -> list[sa.RowMapping]:
    engine = db.create_engine(url, pool_size=1)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement), params)
            return list(result.mappings()) if result.returns_rows else []
    finally:
        engine.dispose()


def _checkpoint_row(url: str, checkpoint_id: str) -> sa.RowMapping:
    return _rows(url, "SELECT * FROM checkpoints WHERE checkpoint_id = :cp", cp=checkpoint_id)[0]


def _reseal(url: str, checkpoint_id: str, state: bytes) -> None:
    """Replace a checkpoint's state and seal it correctly, as a holder of the checkpoint key could."""
    row = _checkpoint_row(url, checkpoint_id)
    sealed = CheckpointSealer([CHECKPOINT_KEY.encode()]).seal(
        checkpoint_id, row["workflow_name"], row["graph_signature"], row["operation_id"], state, datetime.now(UTC)
    )
    _rows(
        url,
        "UPDATE checkpoints SET key_id = :key_id, mac = :mac, state = :state WHERE checkpoint_id = :cp",
        key_id=sealed.key_id,
        mac=sealed.mac,
        state=state,
        cp=checkpoint_id,
    )


def _refused_approval(stack: Stack, started: review_pb2.StartReviewResponse) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        stack.review().Approve(approve(started.proposal.operation_id), timeout=10)
    return refused.value


def _assert_integrity_refusal(refused: grpc.RpcError, started: review_pb2.StartReviewResponse) -> None:
    assert refused.code() == grpc.StatusCode.DATA_LOSS, refused.details()
    assert error_info(refused)[:2] == (
        reasons.CHECKPOINT_INTEGRITY,
        {
            reasons.OPERATION_ID: started.proposal.operation_id,
            reasons.CHECKPOINT_ID: started.pending_review.checkpoint_id,
        },
    )


@pytest.mark.parametrize("gadget", [_System, _Exec, _Popen], ids=["os.system", "builtins.exec", "subprocess.Popen"])
def test_correctly_sealed_malicious_checkpoint_is_refused_and_never_runs(
    make_stack: Callable[..., Stack], tmp_path: Path, gadget: Callable[[Path], object], database_url: str
) -> None:
    stack = make_stack(database_url)
    started = stack.review().StartReview(start_request(), timeout=10)
    marker = tmp_path / "marker"
    _reseal(stack.orchestrator_url, started.pending_review.checkpoint_id, pickle.dumps(gadget(marker)))

    refused = _refused_approval(stack, started)

    _assert_integrity_refusal(refused, started)
    assert not marker.exists()
    assert stack.decisions() == 0 and stack.effects() == 0


def test_sealed_gadget_nested_inside_a_real_checkpoint_is_refused(
    make_stack: Callable[..., Stack], tmp_path: Path
) -> None:
    stack = make_stack()
    started = stack.review().StartReview(start_request(), timeout=10)
    checkpoint_id = started.pending_review.checkpoint_id
    real = decode_state(sealed_checkpoint_from(_checkpoint_row(stack.orchestrator_url, checkpoint_id)))
    marker = tmp_path / "marker"
    real.state = {"hidden": _System(marker)}  # an allowed outer type carrying a forbidden one
    _reseal(stack.orchestrator_url, checkpoint_id, pickle.dumps(real))

    _assert_integrity_refusal(_refused_approval(stack, started), started)
    assert not marker.exists()
    assert stack.decisions() == 0


@pytest.mark.parametrize(
    "corruption",
    [
        "UPDATE checkpoints SET mac = 'é' || substr(mac, 2) WHERE checkpoint_id = :cp",
        "UPDATE checkpoints SET state = 'not a pickle' WHERE checkpoint_id = :cp",
        "UPDATE checkpoints SET mac = CAST(mac AS BLOB) WHERE checkpoint_id = :cp",
        # Text that is not UTF-8: the driver cannot even decode it as text.
        "UPDATE checkpoints SET state = CAST(state AS TEXT) WHERE checkpoint_id = :cp",
        "UPDATE checkpoints SET mac = CAST(X'FFFE' AS TEXT) WHERE checkpoint_id = :cp",
        "UPDATE checkpoints SET key_id = CAST(X'FF' AS TEXT) WHERE checkpoint_id = :cp",
    ],
    ids=["mac-non-ascii", "state-text", "mac-blob", "state-pickle-as-text", "mac-not-utf8", "key-id-not-utf8"],
)
def test_checkpoint_with_corrupt_columns_answers_data_loss(make_stack: Callable[..., Stack], corruption: str) -> None:
    stack = make_stack()
    started = stack.review().StartReview(start_request(), timeout=10)
    _rows(stack.orchestrator_url, corruption, cp=started.pending_review.checkpoint_id)

    _assert_integrity_refusal(_refused_approval(stack, started), started)
    assert stack.decisions() == 0 and stack.effects() == 0


def test_every_checkpoint_of_real_runs_decodes_through_the_restricted_unpickler(
    make_stack: Callable[..., Stack], database_url: str
) -> None:
    stack = make_stack(database_url)
    review = stack.review()
    approved = review.StartReview(start_request(case_id="T-1"), timeout=10)
    declined = review.StartReview(start_request(case_id="T-2"), timeout=10)
    edited = review.StartReview(start_request(case_id="T-3"), timeout=10)
    original = start_request(case_id="T-3")
    review.EditProposal(
        review_pb2.EditProposalRequest(
            expected_operation_id=edited.proposal.operation_id,
            body=original.body + " Thanks.",
            evidence=original.evidence,
            policy=original.policy,
        ),
        timeout=10,
    )
    stored = [sealed_checkpoint_from(row) for row in _rows(stack.orchestrator_url, "SELECT * FROM checkpoints")]
    assert len(stored) >= 4
    for sealed in stored:
        assert decode_state(sealed).checkpoint_id == sealed.checkpoint_id
    assert review.Approve(approve(approved.proposal.operation_id), timeout=10).operation.receipt.receipt_id
    review.Approve(decline(declined.proposal.operation_id), timeout=10)
    assert stack.effects() == 1


def test_every_admitted_name_is_a_class_of_the_installed_framework() -> None:
    for module, name in CHECKPOINT_CLASSES:
        assert isinstance(getattr(importlib.import_module(module), name), type), (module, name)


def test_undecodable_sealed_state_is_an_integrity_refusal() -> None:
    sealed = SealedCheckpoint(
        "cp", "wf", "graph", OperationId("op"), datetime.now(UTC), "key", "mac", b"\x80\x05truncated"
    )
    with pytest.raises(CheckpointIntegrity) as refused:
        decode_state(sealed)
    assert refused.value.checkpoint_id == "cp" and refused.value.operation_id == "op"


@pytest.mark.parametrize("enums_by_name", [True, False], ids=["as-3.11.2", "as-3.11.7"])
def test_a_checkpoint_resumes_and_commits_whichever_python_spelled_its_enums(
    make_stack: Callable[..., Stack], database_url: str, enums_by_name: bool
) -> None:
    stack = make_stack(database_url)
    started = stack.review().StartReview(start_request(), timeout=10)
    checkpoint_id = started.pending_review.checkpoint_id
    state = decode_state(sealed_checkpoint_from(_checkpoint_row(stack.orchestrator_url, checkpoint_id)))
    _reseal(stack.orchestrator_url, checkpoint_id, _pickled(state, enums_by_name=enums_by_name))

    answered = stack.review().Approve(approve(started.proposal.operation_id), timeout=10)

    assert answered.operation.receipt.receipt_id
    assert stack.effects() == 1


class _Getattr:
    """Unpickling this calls ``builtins.getattr(target, name)``, as the 3.11.2 enum form does."""

    def __init__(self, target: object, name: str) -> None:
        self.target, self.name = target, name

    def __reduce__(self) -> tuple[object, tuple[object, str]]:
        return (getattr, (self.target, self.name))


@pytest.mark.parametrize(
    ("target", "name"),
    [
        (MessageType, "__class__"),  # an attribute that is not a member
        (MessageType, "mro"),
        (MessageType, "_member_map_"),
        (CheckpointSealer, "seal"),  # a class outside the admitted list
        ("text", "format"),  # not a class at all
        (MessageType, 1),  # a name that is not a string
    ],
    ids=["dunder", "method", "private", "foreign-class", "instance", "non-str-name"],
)
def test_getattr_in_a_checkpoint_reaches_only_enum_members(target: object, name: str) -> None:
    state = pickle.dumps({"member": _Getattr(target, name)})
    sealed = SealedCheckpoint("cp", "wf", "graph", OperationId("op"), datetime.now(UTC), "key", "mac", state)
    with pytest.raises(CheckpointIntegrity, match=r"builtins\.getattr|CheckpointSealer"):
        decode_state(sealed)


def test_an_admitted_enum_member_by_name_decodes_to_the_member() -> None:
    member = next(iter(MessageType))
    state = _pickled([member], enums_by_name=True)
    sealed = SealedCheckpoint("cp", "wf", "graph", OperationId("op"), datetime.now(UTC), "key", "mac", state)
    assert decode_state(sealed) == [member]
