"""Reflection serves the google.rpc status detail types, so a reflection client can decode the details
of a refusal: asked by a real reflection client, and used by ``buf curl`` against real servers
built by create_server (reflection needs no credentials; the call itself does)."""

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
from google.protobuf import descriptor_pb2
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from decisionflow import reasons
from decisionflow.status_details import ERROR_DOMAIN
from tests.support.secure import SecureStack, start_secure_stack

BUF = Path(sys.executable).with_name("buf")


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
