"""Each method's receive limit is its largest valid request: a request at every bound is served,
one byte over the limit is refused before it is parsed, and over the server's message limit gRPC
refuses the frame itself."""

from __future__ import annotations

import grpc
import pytest

from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2
from orchestrator.validation import MAX_BODY_BYTES, MAX_EVIDENCE, MAX_INT, MAX_QUOTATION_BYTES, MAX_RULES
from tests.support.hostile import Target
from tests.support.secure import raw_call, raw_invoke

REVIEW = "/decisionflow.v1.ReviewService/"
RECEIVER = "/decisionflow.v1.EffectReceiverService/"
EVENTS = "/decisionflow.v1.EventService/"


def _largest_start_review() -> review_pb2.StartReviewRequest:
    evidence = [
        common_pb2.Evidence(source_id=f"S{i:0127d}", version=MAX_INT, quotation="é" * (MAX_QUOTATION_BYTES // 2))
        for i in range(MAX_EVIDENCE)
    ]
    policy = common_pb2.Policy(
        name="p" * 128,
        version_label="v" * 64,
        allowance_units=MAX_INT,
        rules={f"rule-{i:059d}": "r" * 1024 for i in range(MAX_RULES)},
    )
    return review_pb2.StartReviewRequest(
        case_id="L" * 64, action="record_support_review", body="b" * MAX_BODY_BYTES, evidence=evidence, policy=policy
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _unknown_field_message(size: int) -> bytes:
    """A well-formed message of exactly size bytes: one unknown length-delimited field (16 KiB to 2 MiB)."""
    tag = _varint(1000 << 3 | 2)
    length = size - len(tag) - 3
    data = tag + _varint(length) + b"x" * length
    assert len(data) == size
    return data


def test_the_largest_valid_start_review_is_served(target: Target) -> None:
    request = _largest_start_review()
    limit = target.receive_limits(receiver=False).for_method(REVIEW + "StartReview")
    # Sized to this request: 4 KiB to spare, and the test's action is shorter than the widest one.
    assert 0 < limit - request.ByteSize() <= 4096 + 64
    answer = target.stack.review().StartReview(request, timeout=30)
    assert answer.created and answer.proposal.case_id == "L" * 64
    assert len(answer.proposal.evidence) == MAX_EVIDENCE


@pytest.mark.parametrize(
    ("receiver", "method"),
    [
        (False, REVIEW + "StartReview"),
        (False, REVIEW + "GetOperation"),
        (False, EVENTS + "WatchEvents"),
        (True, RECEIVER + "BatchLookup"),
    ],
)
def test_a_request_over_its_method_limit_is_refused_unparsed(target: Target, receiver: bool, method: str) -> None:
    limit = target.receive_limits(receiver).for_method(method)
    assert limit < target.receive_limits(receiver).largest
    data = _unknown_field_message(limit + 1)
    before = target.states()
    with pytest.raises(grpc.RpcError) as refused:
        raw_invoke(target.channel(receiver), method, data)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    _, _, violations = error_info(refused.value)
    assert [violation.field for violation in violations] == ["request"]
    assert str(limit) in violations[0].description
    assert target.states() == before
    target.assert_serving()


def test_over_the_servers_message_limit_grpc_refuses_the_frame(target: Target) -> None:
    largest = target.receive_limits(receiver=True).largest
    code, _ = raw_call(target.channel(receiver=True), RECEIVER + "Apply", b"\x0a" + b"\x00" * largest)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    target.assert_serving()
