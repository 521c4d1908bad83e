"""Reflection serves the google.rpc status detail types, so a reflection client can decode the details
of a refusal: asked by a real reflection client, and used by ``buf curl`` against real servers
built by create_server (reflection needs no credentials; the call itself does). It answers under
both protocol names, grpc.reflection.v1 (which current tools ask first) and v1alpha."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from decisionflow import reasons
from decisionflow.status_details import ERROR_DOMAIN
from tests.support.secure import SecureStack, start_secure_stack

BUF = Path(sys.executable).with_name("buf")
V1 = "grpc.reflection.v1"
SERVICES = {
    "orchestrator": {
        "decisionflow.v1.ReviewService",
        "decisionflow.v1.OperationsService",
        "decisionflow.v1.AuditService",
        "decisionflow.v1.EventService",
    },
    "receiver": {"decisionflow.v1.EffectReceiverService"},
}
ANNOUNCED_BY_BOTH = {"grpc.health.v1.Health", f"{V1}.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """Both servers with authentication on, for the whole module."""
    stack = start_secure_stack(tmp_path_factory.mktemp("reflection"))
    try:
        yield stack
    finally:
        stack.close()


def _files_containing(port: int, symbols: list[str]) -> list[tuple[str, list[descriptor_pb2.FileDescriptorProto]]]:
    """Ask the server's reflection service for the file of each symbol; return (answer kind, files) per symbol."""

    async def ask() -> list[tuple[str, list[descriptor_pb2.FileDescriptorProto]]]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            requests = [reflection_pb2.ServerReflectionRequest(file_containing_symbol=s) for s in symbols]
            answers = []
            async for response in stub.ServerReflectionInfo(iter(requests), timeout=15):
                kind = response.WhichOneof("message_response") or ""
                files = [
                    descriptor_pb2.FileDescriptorProto.FromString(raw)
                    for raw in response.file_descriptor_response.file_descriptor_proto
                ]
                answers.append((kind, files))
            return answers

    return asyncio.run(ask())


@pytest.mark.parametrize("receiver", [False, True], ids=["orchestrator", "receiver"])
def test_reflection_answers_with_the_files_of_the_status_detail_types(secure: SecureStack, receiver: bool) -> None:
    port = secure.stack.receiver_port if receiver else secure.stack.orchestrator_port
    symbols = ["google.rpc.ErrorInfo", "google.rpc.BadRequest", "google.rpc.Status", "google.rpc.NoSuchType"]
    answers = _files_containing(port, symbols)

    assert [kind for kind, _ in answers] == [*["file_descriptor_response"] * 3, "error_response"]
    error_details, bad_request, status = (files[0] for _, files in answers[:3])
    assert error_details.name == bad_request.name == "google/rpc/error_details.proto"
    assert {"ErrorInfo", "BadRequest"} <= {message.name for message in error_details.message_type}
    assert status.name == "google/rpc/status.proto"
    # The dependencies come along, so the client can build the descriptors offline.
    assert "google/protobuf/any.proto" in {file.name for _, files in answers[:3] for file in files}


def test_buf_curl_reads_a_refusal_through_reflection(secure: SecureStack, tmp_path: Path) -> None:
    if not BUF.exists():
        pytest.skip(f"buf is not installed next to {sys.executable} (the buf-bin package)")
    url = f"http://127.0.0.1:{secure.stack.orchestrator_port}/decisionflow.v1.ReviewService/Approve"
    command = [str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge", "--data", "{}"]
    done = subprocess.run(
        [*command, "--header", f"authorization: Bearer {secure.tokens['rita']}", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},  # nothing of the caller's buf configuration
    )
    # buf curl resolved the method through reflection (no schema given), sent the request, and
    # printed the refusal as JSON with each detail named by its type.
    assert done.returncode != 0 and done.stdout == "", done.stderr
    refusal = json.loads(done.stderr)
    assert refusal["code"] == "invalid_argument"
    details = {detail["type"]: detail for detail in refusal["details"]}
    assert set(details) == {"google.rpc.ErrorInfo", "google.rpc.BadRequest"}
    raw = details["google.rpc.ErrorInfo"]["value"]
    info = error_details_pb2.ErrorInfo.FromString(base64.b64decode(raw + "=" * (-len(raw) % 4)))
    assert (info.domain, info.reason) == (ERROR_DOMAIN, reasons.DECISION_REQUIRED)


def _v1_messages() -> tuple[type[Message], type[Message]]:
    """The grpc.reflection.v1 request and response messages, in a pool of their own: the v1 protocol is
    the v1alpha file under the v1 package (same messages, same field numbers), as grpc-proto defines it."""
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old, new = f".{file.package}.", f".{V1}."
    file.name, file.package = "grpc/reflection/v1/reflection.proto", V1
    file.ClearField("options")
    for message in file.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new)
    for method in file.service[0].method:
        method.input_type, method.output_type = (
            method.input_type.replace(old, new),
            method.output_type.replace(old, new),
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(  # type: ignore[return-value]
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{V1}.{name}"))
        for name in ("ServerReflectionRequest", "ServerReflectionResponse")
    )


def _ask_v1(port: int, requests: list[Message]) -> list[Message]:
    _, response_type = _v1_messages()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        info = channel.stream_stream(
            f"/{V1}.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return list(info(iter(requests), timeout=15))


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_v1_reflection_client_lists_the_services_and_reads_their_files(secure: SecureStack, service: str) -> None:
    port = secure.stack.receiver_port if service == "receiver" else secure.stack.orchestrator_port
    request = _v1_messages()[0]
    listed, described = _ask_v1(
        port, [request(list_services=""), request(file_containing_symbol="google.rpc.ErrorInfo")]
    )
    names = {entry.name for entry in listed.list_services_response.service}  # type: ignore[attr-defined]
    assert names == SERVICES[service] | ANNOUNCED_BY_BOTH
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto  # type: ignore[attr-defined]
    ]
    assert files[0].name == "google/rpc/error_details.proto"


def test_buf_curl_lists_the_services_over_reflection_v1(secure: SecureStack, tmp_path: Path) -> None:
    if not BUF.exists():
        pytest.skip(f"buf is not installed next to {sys.executable} (the buf-bin package)")
    done = subprocess.run(
        [
            str(BUF),
            "curl",
            "--protocol",
            "grpc",
            "--http2-prior-knowledge",
            "--reflect-protocol",
            "grpc-v1",  # only v1: no fallback to v1alpha
            "--list-services",
            f"http://127.0.0.1:{secure.stack.orchestrator_port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == SERVICES["orchestrator"] | ANNOUNCED_BY_BOTH
