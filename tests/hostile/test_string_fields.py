"""Hostile text in every string field of every request (found through the descriptors): SQL
metacharacters with a NUL, a megabyte of Unicode, ids of the wrong shape. Each is refused with
INVALID_ARGUMENT, the refusal's details reach the caller, nothing is written, and the servers keep
serving. SQL metacharacters in free text are data: stored and returned byte for byte."""

from __future__ import annotations

import base64
import json

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message

from decisionflow.channels import MAX_MESSAGE_BYTES
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, effect_receiver_pb2, operations_pb2, review_pb2
from tests.security.contract import (
    StringPath,
    contract_methods,
    method_path,
    request_for,
    served_by_receiver,
    show,
    string_paths,
    with_string,
)
from tests.support.hostile import Target
from tests.support.secure import raw_invoke
from tests.support.stack import start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

SQL_AND_NUL = "x'; DROP TABLE proposals; --\" OR 1=1 /* \\ % _ \x00 */"
MEGABYTE_OF_UNICODE = "żółć🦉" * 83_000  # 996,000 UTF-8 bytes: the request still fits in 1 MiB

FIELDS = [(method, path) for method in contract_methods() for path in string_paths(method.input_type)]
# The reconciler's note of a failed lookup: cut to 2,000 characters, never refused for its length
# (test_a_long_lookup_error_is_cut_not_refused).
TRUNCATED_FREE_TEXT = {"error"}


def _field_id(item: tuple[MethodDescriptor, StringPath]) -> str:
    return f"{item[0].name}:{show(item[1])}"


def _base(method: MethodDescriptor, target: Target) -> Message:
    if method_path(method) == "/decisionflow.v1.ReviewService/GetProposal":
        return review_pb2.GetProposalRequest()  # exactly one of its two ids may be set: the one under test
    return request_for(method, target.operation_id)


def _refused(target: Target, method: MethodDescriptor, request: Message) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        raw_invoke(target.channel(served_by_receiver(method)), method_path(method), request.SerializeToString())
    return refused.value


def _assert_invalid(target: Target, method: MethodDescriptor, request: Message) -> None:
    error = _refused(target, method, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (method.name, error.code(), error.details())
    _, _, violations = error_info(error)
    assert violations, "the field violations reach the caller"


@pytest.mark.parametrize(("method", "path"), FIELDS, ids=[_field_id(f) for f in FIELDS])
def test_sql_metacharacters_and_nul_are_refused(target: Target, method: MethodDescriptor, path: StringPath) -> None:
    before = target.states()
    _assert_invalid(target, method, with_string(_base(method, target), path, SQL_AND_NUL))
    assert target.states() == before
    target.assert_serving()


BOUNDED_FIELDS = [(method, path) for method, path in FIELDS if path[-1] not in TRUNCATED_FREE_TEXT]


@pytest.mark.parametrize(("method", "path"), BOUNDED_FIELDS, ids=[_field_id(f) for f in BOUNDED_FIELDS])
def test_a_megabyte_of_unicode_is_refused(target: Target, method: MethodDescriptor, path: StringPath) -> None:
    request = with_string(_base(method, target), path, MEGABYTE_OF_UNICODE)
    assert MAX_MESSAGE_BYTES - 64 * 1024 < request.ByteSize() < MAX_MESSAGE_BYTES
    before = target.states()
    receiver = served_by_receiver(method)
    if target.refusal_code(receiver, request.ByteSize()) == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # Beyond the server's message limit gRPC refuses the frame before anything parses it.
        assert _refused(target, method, request).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    else:
        _assert_invalid(target, method, request)
    assert target.states() == before
    target.assert_serving()


OPERATION_ID_SHAPES = (
    "",
    "op-v1-",
    "op-v1-" + "A" * 64,
    "op-v1-" + "g" * 64,
    "op-v1-" + "a" * 63,
    "op-v1-" + "a" * 65,
    "op-v2-" + "a" * 64,
    "ev-v1-" + "a" * 64,
    " op-v1-" + "a" * 64,
    "op-v1-" + "a" * 64 + "\n",
    "op-v1-" + "\uff41" * 64,  # fullwidth 'a'
)
# Id fields a request may leave empty: StartReview names the proposal it replaces only when it replaces one;
# WatchEvents filters by case or operation only when one is named.
OPTIONAL_IDS = {
    ("StartReview", ("expected_operation_id",)),
    ("WatchEvents", ("case_id",)),
    ("WatchEvents", ("operation_id",)),
}
CASE_ID_SHAPES = ("", "T 1042", "T-1042\n", "x" * 65, "T/1042", "T-1042;", "\uff34-1042")


def _is_id(path: StringPath) -> bool:
    if path[-1] == "[0]":
        return path[-2] == "operation_ids"
    if "receipt" in path:
        return False  # a receipt's operation id is only compared with the settlement's own
    return path[-1] in ("operation_id", "expected_operation_id", "case_id")


ID_FIELDS = [(method, path) for method, path in FIELDS if _is_id(path)]


@pytest.mark.parametrize(("method", "path"), ID_FIELDS, ids=[_field_id(f) for f in ID_FIELDS])
def test_ids_of_the_wrong_shape_are_refused(target: Target, method: MethodDescriptor, path: StringPath) -> None:
    shapes: tuple[str, ...] = CASE_ID_SHAPES if "case_id" in path else OPERATION_ID_SHAPES
    if (method.name, tuple(path)) in OPTIONAL_IDS:
        shapes = tuple(shape for shape in shapes if shape)  # empty means "not given"
    before = target.states()
    for shape in shapes:
        _assert_invalid(target, method, with_string(_base(method, target), path, shape))
    assert target.states() == before
    target.assert_serving()


def test_every_id_field_is_checked_for_shape() -> None:
    ids = {(m.name, show(p)) for m, p in ID_FIELDS}
    assert ("Approve", "operation_id") in ids
    assert ("GetProposal", "case_id") in ids
    assert ("BatchLookup", "operation_ids[0]") in ids
    assert ("SettleOperation", "settlement.operation_id") in ids
    assert len(ids) >= 14


def test_sql_metacharacters_in_free_text_are_stored_verbatim(target: Target) -> None:
    text = "Robert'); DROP TABLE proposals; -- \" OR '1'='1' /* % _ \\ */"
    request = start_request(case_id="T-9001", body=text)
    request.evidence[0].quotation = text
    request.policy.rules["note'; DELETE FROM decisions; --"] = text
    review = target.stack.review()
    started = review.StartReview(request, timeout=15)
    found = review.GetProposal(review_pb2.GetProposalRequest(operation_id=started.proposal.operation_id), timeout=10)
    assert found.proposal.body == text
    assert found.proposal.evidence[0].quotation == text
    assert dict(found.proposal.policy.rules) == {"note'; DELETE FROM decisions; --": text}
    orchestrator, _ = target.states()
    assert len(orchestrator["proposals"]) >= 2  # the table is still there, with the seeded proposal
    target.assert_serving()


def test_a_long_lookup_error_is_cut_not_refused(target: Target) -> None:
    settlement = operations_pb2.Settlement(
        operation_id=target.operation_id, status=common_pb2.LOOKUP_STATUS_UNSPECIFIED, error=MEGABYTE_OF_UNICODE
    )
    answer = target.stack.operations().SettleOperation(
        operations_pb2.SettleOperationRequest(settlement=settlement), timeout=15
    )
    assert answer.operation.last_lookup.error == MEGABYTE_OF_UNICODE[:2000]
    assert not answer.settled


def _many_bad(kind: str) -> tuple[MethodDescriptor, Message]:
    methods = {m.name: m for m in contract_methods()}
    if kind == "batch lookup":
        return methods["BatchLookup"], effect_receiver_pb2.BatchLookupRequest(operation_ids=["bad id"] * 1000)
    request = start_request(case_id="T-9002")
    for index in range(2000):
        request.policy.rules[f"bad\x00key {index:04d}"] = "v"
    return methods["StartReview"], request


@pytest.mark.parametrize("kind", ["batch lookup", "policy rules"])
def test_many_violations_still_arrive_as_a_readable_refusal(target: Target, kind: str) -> None:
    method, request = _many_bad(kind)
    before = target.states()
    error = _refused(target, method, request)
    # Not a transport failure: the rich status fits in the trailers and names the first violations.
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    _, _, violations = error_info(error)
    assert 0 < len(violations) <= 100
    assert target.states() == before


OUT_OF_RANGE_TIMES = (
    ("observed_at", 253402300800, 0),  # year 10000
    ("observed_at", -62135596801, 0),  # before year 1
    ("observed_at", 1, -1),
    ("observed_at", 1, 1_000_000_000),
    ("receipt.applied_at", 2**62, 0),
)


@pytest.mark.parametrize(("field", "seconds", "nanos"), OUT_OF_RANGE_TIMES)
def test_timestamps_out_of_range_are_refused(target: Target, field: str, seconds: int, nanos: int) -> None:
    settlement = operations_pb2.Settlement(
        operation_id=target.operation_id,
        status=common_pb2.LOOKUP_STATUS_APPLIED,
        receipt=common_pb2.Receipt(receipt_id="rcpt-1"),
    )
    stamp = settlement.receipt.applied_at if field == "receipt.applied_at" else settlement.observed_at
    stamp.seconds, stamp.nanos = seconds, nanos
    method = next(m for m in contract_methods() if m.name == "SettleOperation")
    before = target.states()
    _assert_invalid(target, method, operations_pb2.SettleOperationRequest(settlement=settlement))
    assert target.states() == before


@pytest.mark.parametrize("seconds", [315_576_000_000, 10**15, -(10**15)])
def test_min_age_out_of_range_is_refused(target: Target, seconds: int) -> None:
    method = next(m for m in contract_methods() if m.name == "ListOperations")
    request = operations_pb2.ListOperationsRequest()
    request.min_age.seconds = seconds
    _assert_invalid(target, method, request)


def _token(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


FORGED_PAGE_TOKENS = {
    "ListOperations": (
        _token(b"[" * 100_000),
        _token(json.dumps(["2026-01-01T00:00:00+00:00", "x\x00"]).encode()),
        _token(json.dumps(["2026-01-01T00:00:00+00:00", "x" * 100_000]).encode()),
        "%%%",
    ),
    "ListPendingReviews": (
        _token(b"[" * 100_000),
        _token(json.dumps(["pending_reviews", "2026-01-01T00:00:00+00:00", "x\x00"]).encode()),
        _token(json.dumps(["pending_reviews", "2026-01-01T00:00:00+00:00", "x" * 100_000]).encode()),
        _token(json.dumps(["pending_reviews", "2026-01-01T00:00:00", "op-v1-" + "0" * 64]).encode()),
        _token(json.dumps(["pending_reviews", "not a time", "op-v1-" + "0" * 64]).encode()),
        _token(json.dumps(["operations", "2026-01-01T00:00:00+00:00", "op-v1-" + "0" * 64]).encode()),
        "%%%",
    ),
    "ListEffects": (
        _token(b"after:" + b"9" * 30),
        _token(b"after:" + b"9" * 5000),
        _token(b"after:18446744073709551616"),
        _token(b"after:-1"),
        "%%%",
    ),
}


@pytest.mark.parametrize("name", sorted(FORGED_PAGE_TOKENS))
def test_forged_page_tokens_are_refused(target: Target, name: str) -> None:
    method = next(m for m in contract_methods() if m.name == name)
    for token in FORGED_PAGE_TOKENS[name]:
        request = request_for(method, target.operation_id)
        _assert_invalid(target, method, with_string(request, ("page_token",), token))
    target.assert_serving()
