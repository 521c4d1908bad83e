"""Bytes that are not a well-formed request, sent to every method of every service through a raw
channel: random bytes, truncated messages, oversize frames, deep nesting and floods of repeated
entries. Each is refused (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED from gRPC for a frame over the
server's message limit) or answered on its merits, nothing is written, and the servers keep serving."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import DecodeError, Message

from decisionflow.channels import MAX_MESSAGE_BYTES
from tests.security.contract import contract_methods, method_path, request_class, request_for, served_by_receiver
from tests.support.hostile import Target
from tests.support.secure import raw_call

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

METHODS = contract_methods()
# Outcomes a request that parses may earn on its merits; never UNKNOWN, INTERNAL or UNAVAILABLE.
ON_ITS_MERITS = (
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
)


def _parses(method: MethodDescriptor, data: bytes) -> bool:
    try:
        request_class(method).FromString(data)
    except DecodeError:
        return False
    return True


def _send(target: Target, method: MethodDescriptor, data: bytes) -> grpc.StatusCode:
    code, _ = raw_call(target.channel(served_by_receiver(method)), method_path(method), data)
    return code


def _check(target: Target, method: MethodDescriptor, data: bytes) -> None:
    code = _send(target, method, data)
    if _parses(method, data):
        assert code in ON_ITS_MERITS, (method_path(method), data[:64], code)
    else:
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (method_path(method), data[:64], code)


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_random_bytes_are_refused(target: Target, method: MethodDescriptor) -> None:
    rng = random.Random(f"random-bytes {method_path(method)}")
    before = target.settled_states()
    for _ in range(40):
        _check(target, method, rng.randbytes(rng.choice((1, 2, 3, 5, 8, 16, 64, 256, 4096))))
    assert target.states() == before
    target.assert_serving()


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_truncated_requests_are_refused(target: Target, method: MethodDescriptor) -> None:
    whole = request_for(method, target.operation_id).SerializeToString()
    cuts = sorted({*range(1, min(len(whole), 24)), *range(24, len(whole), max(1, len(whole) // 40))})
    before = target.settled_states()
    for cut in cuts:
        _check(target, method, whole[:cut])
    assert target.states() == before
    target.assert_serving()


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_oversize_frames_are_refused_by_grpc(target: Target, method: MethodDescriptor) -> None:
    before = target.settled_states()
    for size in (MAX_MESSAGE_BYTES + 1, 3 * MAX_MESSAGE_BYTES):
        # A first string field of the right length: the frame is refused before anything parses it.
        body = b"a" * size
        frame = b"\x0a" + _varint(len(body)) + body
        assert len(frame) > MAX_MESSAGE_BYTES
        assert _send(target, method, frame) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert target.states() == before
    target.assert_serving()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


UNKNOWN_FIELD = 1000  # no request uses it


def _nested_groups(depth: int, closed: bool) -> bytes:
    start, end = _varint(UNKNOWN_FIELD << 3 | 3), _varint(UNKNOWN_FIELD << 3 | 4)
    return start * depth + (end * depth if closed else b"")


def _nested_lengths(depth: int) -> bytes:
    inner = b""
    for _ in range(depth):
        inner = _varint(UNKNOWN_FIELD << 3 | 2) + _varint(len(inner)) + inner
    return inner


@pytest.mark.parametrize("method", METHODS, ids=method_path)
def test_deep_nesting_is_refused_or_ignored(target: Target, method: MethodDescriptor) -> None:
    empty_code = _send(target, method, b"")
    before = target.settled_states()
    for nested in (_nested_groups(50_000, closed=True), _nested_groups(200_000, closed=False)):
        # The parser's recursion limit refuses it: the request is not well formed.
        assert not _parses(method, nested)
        refusal = target.refusal_code(served_by_receiver(method), len(nested))
        assert _send(target, method, nested) == refusal, method_path(method)
    # Unknown length-delimited fields are kept as opaque bytes however deep: the request means what
    # it meant without them.
    opaque = _nested_lengths(2_000)
    assert _parses(method, opaque)
    assert _send(target, method, opaque) == empty_code
    assert target.states() == before
    target.assert_serving()


def _repeated_paths(descriptor: Descriptor, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for field in descriptor.fields:
        if field.is_repeated:
            yield (*prefix, field.name)
        elif field.message_type is not None and not field.message_type.full_name.startswith("google.protobuf."):
            yield from _repeated_paths(field.message_type, (*prefix, field.name))


FLOODS = [(method, path) for method in METHODS for path in _repeated_paths(method.input_type)]
# Listing many copies of the same state asks for that state: a read answered on its merits.
FLOOD_READS = {
    ("/decisionflow.v1.OperationsService/ListOperations", ("states",)),
    ("/decisionflow.v1.EventService/WatchEvents", ("kinds",)),
}


def _append(holder: Any, name: str, index: int) -> None:
    field = holder.DESCRIPTOR.fields_by_name[name]
    container = getattr(holder, name)
    nested = field.message_type
    if nested is not None and nested.GetOptions().map_entry:
        container[f"k{index:07d}"] = "v"
    elif nested is not None:
        element = container.add()
        first = nested.fields[0]
        if first.type == FieldDescriptor.TYPE_STRING:
            setattr(element, first.name, f"s{index:07d}")
    elif field.type == FieldDescriptor.TYPE_STRING:
        container.append("x")
    else:
        container.append(1)


def _flood(request: Message, path: tuple[str, ...], budget: int) -> Message:
    holder: Any = request
    for name in path[:-1]:
        holder = getattr(holder, name)
    start = request.ByteSize()
    for index in range(1000):
        _append(holder, path[-1], index)
    # Sized once from a sample (entries have a fixed width): measuring after every append is quadratic.
    per_entry = (request.ByteSize() - start) / 1000
    for index in range(1000, int((budget - start) / per_entry) - 8):
        _append(holder, path[-1], index)
    return request


@pytest.mark.parametrize(("method", "path"), FLOODS, ids=[f"{method_path(m)}:{'.'.join(p)}" for m, p in FLOODS])
def test_floods_of_repeated_entries_are_refused(
    target: Target, method: MethodDescriptor, path: tuple[str, ...]
) -> None:
    # As many entries as the method's receive limit admits, so that the flood reaches its checks.
    limit = target.receive_limits(served_by_receiver(method)).for_method(method_path(method))
    request = _flood(request_for(method, target.operation_id), path, min(MAX_MESSAGE_BYTES, limit) - 8 * 1024)
    data = request.SerializeToString()
    assert len(data) < limit
    before = target.settled_states()
    code = _send(target, method, data)
    if (method_path(method), path) in FLOOD_READS:
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT)
    else:
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (method_path(method), path, code)
    assert target.states() == before
    target.assert_serving()
