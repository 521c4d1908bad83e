"""Client side: bearer metadata and the interceptors that add it, against a real server."""

from __future__ import annotations

import asyncio
from typing import cast

import grpc
import pytest

from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow_server.runtime.auth import BearerTokenInterceptor, SyncBearerTokenInterceptor, bearer_metadata
from tests.support.auth import TOKENS, ContractRecorder, known_credentials, serve


def test_bearer_metadata_is_the_authorization_header() -> None:
    assert bearer_metadata("abc") == (("authorization", "Bearer abc"),)
    for unusable in ("", "two words", "line\nbreak", "tab\t"):
        with pytest.raises(ValueError, match="bearer token"):
            bearer_metadata(unusable)


def test_the_aio_interceptor_authenticates_every_call_and_leaves_an_explicit_header_alone() -> None:
    recorder = ContractRecorder()

    async def scenario() -> None:
        async with (
            serve(recorder.register, credentials=known_credentials()) as running,
            grpc.aio.insecure_channel(
                f"127.0.0.1:{running.port}",
                # grpc-stubs types aio interceptors as an opaque placeholder that must be cast.
                interceptors=[cast(grpc.aio.ClientInterceptor, BearerTokenInterceptor(TOKENS["rita"]))],
            ) as channel,
        ):
            stub = review_pb2_grpc.ReviewServiceStub(channel)
            await stub.Approve(review_pb2.ApproveRequest())
            await stub.GetProposal(review_pb2.GetProposalRequest(), metadata=(("x-request-id", "r-1"),))
            await stub.StartReview(review_pb2.StartReviewRequest(), metadata=bearer_metadata(TOKENS["arthur"]))
        assert [p.name for p in recorder.principals] == ["rita", "rita", "arthur"]

    asyncio.run(scenario())


def test_the_sync_interceptor_authenticates_every_call() -> None:
    def call_synchronously(port: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:
            channel = grpc.intercept_channel(plain, SyncBearerTokenInterceptor(TOKENS["rita"]))
            stub = review_pb2_grpc.ReviewServiceStub(channel)
            stub.Approve(review_pb2.ApproveRequest(), timeout=10)
            stub.GetProposal(review_pb2.GetProposalRequest(), metadata=(("x-request-id", "r-1"),), timeout=10)
            with pytest.raises(grpc.RpcError) as refused:
                stub.StartReview(review_pb2.StartReviewRequest(), timeout=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            stub.StartReview(review_pb2.StartReviewRequest(), metadata=bearer_metadata(TOKENS["arthur"]), timeout=10)

    recorder = ContractRecorder()

    async def scenario() -> None:
        async with serve(recorder.register, credentials=known_credentials()) as running:
            # The blocking client runs on a thread so the server's event loop keeps serving.
            await asyncio.to_thread(call_synchronously, running.port)
        assert [p.name for p in recorder.principals] == ["rita", "rita", "arthur"]

    asyncio.run(scenario())
