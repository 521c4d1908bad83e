"""AuthInterceptor on a real aio server: who is admitted, who is refused, and what the servicer sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from decisionflow import reasons
from decisionflow.v1 import review_pb2, review_pb2_grpc
from decisionflow_server.runtime.auth import (
    ANONYMOUS,
    RPC_ROLES,
    AuthInterceptor,
    Credentials,
    Principal,
    Role,
    Unauthenticated,
    current_principal,
)
from tests.support.auth import TOKENS, bearer, known_credentials, refusal, serve, token_principal

Context = grpc.aio.ServicerContext[Any, Any]
REVIEW = "/decisionflow.v1.ReviewService/"


class RecordingReviewService(review_pb2_grpc.ReviewServiceServicer):
    """A generated-servicer ReviewService (requests really deserialised) that records current_principal()."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.principals: list[Principal] = []
        self.delay = delay

    async def _record(self) -> None:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)  # lets concurrent calls interleave before the read
        self.principals.append(current_principal())

    async def StartReview(self, request: review_pb2.StartReviewRequest, context: Context) -> Any:
        await self._record()
        return review_pb2.StartReviewResponse()

    async def GetProposal(self, request: review_pb2.GetProposalRequest, context: Context) -> Any:
        await self._record()
        return review_pb2.GetProposalResponse()

    async def EditProposal(self, request: review_pb2.EditProposalRequest, context: Context) -> Any:
        await self._record()
        return review_pb2.EditProposalResponse()

    async def Approve(self, request: review_pb2.ApproveRequest, context: Context) -> Any:
        await self._record()
        assert request.operation_id == "op-v1-" + "0" * 64  # the request arrived deserialised
        return review_pb2.ApproveResponse()

    async def GetOperation(self, request: review_pb2.GetOperationRequest, context: Context) -> Any:
        await self._record()
        return review_pb2.GetOperationResponse()

    async def ListPendingReviews(self, request: review_pb2.ListPendingReviewsRequest, context: Context) -> Any:
        await self._record()
        return review_pb2.ListPendingReviewsResponse()

    async def GetCaller(self, request: review_pb2.GetCallerRequest, context: Context) -> Any:
        await self._record()
        return review_pb2.GetCallerResponse()

    def register(self, server: grpc.aio.Server) -> Sequence[str]:
        """start_server's register callback."""
        review_pb2_grpc.add_ReviewServiceServicer_to_server(self, server)
        return (review_pb2.DESCRIPTOR.services_by_name["ReviewService"].full_name,)


APPROVE = review_pb2.ApproveRequest(operation_id="op-v1-" + "0" * 64)


async def call_review(
    service: RecordingReviewService,
    calls: Any,
    *,
    credentials: Credentials | None = None,
    policy: Any = RPC_ROLES,
) -> list[Any]:
    """Serve service behind the interceptor and run calls(stub); return what each call gave or raised."""
    async with (
        serve(service.register, credentials=credentials, policy=policy) as running,
        grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
    ):
        result: list[Any] = await calls(review_pb2_grpc.ReviewServiceStub(channel))
        return result


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ((), "no credentials"),
        ((("authorization", "Bearer not-a-known-token"),), "unknown token"),
        ((("authorization", f"Basic {TOKENS['rita']}"),), "not a bearer scheme"),
        ((("authorization", "Bearer "),), "empty token"),
        ((("authorization", f"Bearer {TOKENS['rita']}x"),), "token with an extra character"),
        ((("authorization", f"Bearer {TOKENS['rita']}"), ("authorization", f"Bearer {TOKENS['rita']}")), "twice"),
    ],
)
def test_missing_or_bad_credentials_are_unauthenticated_before_the_servicer_runs(
    metadata: tuple[tuple[str, str], ...], why: str
) -> None:
    service = RecordingReviewService()

    async def calls(stub: Any) -> list[Any]:
        return [await refusal(stub.Approve(APPROVE, metadata=metadata))]

    [(code, reason, _)] = asyncio.run(call_review(service, calls, credentials=known_credentials()))
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, reasons.UNAUTHENTICATED), why
    assert service.calls == 0


def test_a_principal_without_the_role_is_permission_denied_before_the_servicer_runs() -> None:
    service = RecordingReviewService()

    async def calls(stub: Any) -> list[Any]:
        return [await refusal(stub.Approve(APPROVE, metadata=bearer("arthur")))]

    [(code, reason, metadata)] = asyncio.run(call_review(service, calls, credentials=known_credentials()))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, reasons.PERMISSION_DENIED)
    assert metadata == {"rpc": REVIEW + "Approve", "principal": "arthur", "required_roles": "reviewer"}
    assert service.calls == 0


def test_a_principal_with_the_role_is_admitted_and_the_servicer_sees_it() -> None:
    service = RecordingReviewService()

    async def calls(stub: Any) -> list[Any]:
        return [
            await stub.Approve(APPROVE, metadata=bearer("rita")),
            await stub.StartReview(review_pb2.StartReviewRequest(), metadata=bearer("sam")),
        ]

    asyncio.run(call_review(service, calls, credentials=known_credentials()))
    assert service.principals == [
        Principal("rita", frozenset({Role.REVIEWER}), "token"),
        Principal("sam", frozenset({Role.REVIEWER, Role.AUTHOR}), "token"),
    ]


def test_concurrent_calls_each_see_their_own_principal() -> None:
    service = RecordingReviewService(delay=0.05)
    names = ["rita", "arthur", "olga", "sam"] * 3

    async def calls(stub: Any) -> list[Any]:
        return await asyncio.gather(
            *(stub.GetProposal(review_pb2.GetProposalRequest(), metadata=bearer(name)) for name in names)
        )

    asyncio.run(call_review(service, calls, credentials=known_credentials()))
    assert sorted(p.name for p in service.principals) == sorted(names)
    assert all(p == token_principal(p.name) for p in service.principals)


def test_health_and_reflection_need_no_credentials() -> None:
    async def scenario() -> set[str]:
        async with (
            serve(RecordingReviewService().register, credentials=known_credentials()) as running,
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
        ):
            health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            responses = [r async for r in reflection.ServerReflectionInfo(iter([request]))]
        return {s.name for s in responses[0].list_services_response.service}

    assert "decisionflow.v1.ReviewService" in asyncio.run(scenario())


@pytest.mark.parametrize(("credentials", "identity"), [(known_credentials(), "sam"), (None, None)])
def test_a_method_missing_from_the_policy_is_refused_even_with_every_role(
    credentials: Credentials | None, identity: str | None
) -> None:
    # With credentials None authentication is off and the caller holds every role: still refused.
    policy = {method: roles for method, roles in RPC_ROLES.items() if method != REVIEW + "GetOperation"}
    metadata = () if identity is None else bearer(identity)
    service = RecordingReviewService()

    async def calls(stub: Any) -> list[Any]:
        refused = await refusal(stub.GetOperation(review_pb2.GetOperationRequest(), metadata=metadata))
        await stub.GetProposal(review_pb2.GetProposalRequest(), metadata=metadata)
        return [refused]

    [(code, reason, _)] = asyncio.run(call_review(service, calls, credentials=credentials, policy=policy))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, reasons.PERMISSION_DENIED)
    assert service.calls == 1  # only GetProposal ran


def test_without_credentials_every_caller_is_the_anonymous_principal() -> None:
    service = RecordingReviewService()

    async def calls(stub: Any) -> list[Any]:
        await stub.Approve(APPROVE)
        await stub.StartReview(review_pb2.StartReviewRequest(), metadata=bearer("rita"))
        return []

    asyncio.run(call_review(service, calls, credentials=None))
    assert service.principals == [ANONYMOUS, ANONYMOUS]
    assert ANONYMOUS.roles == frozenset(Role)
    assert not AuthInterceptor(None, RPC_ROLES).authenticated
    assert AuthInterceptor(known_credentials(), RPC_ROLES).authenticated


def test_current_principal_outside_an_admitted_call_fails_closed() -> None:
    with pytest.raises(Unauthenticated):
        current_principal()


# Streaming shapes, through generic handlers on a fake service: the contract's RPCs are all unary,
# but the interceptor must not leave a streaming method unguarded.
_FAKE = "decisionflow.test.Streams"


def _register_streams(calls: list[str]) -> Any:
    async def unary_stream(request: bytes, context: Context) -> AsyncIterator[bytes]:
        calls.append("unary_stream")
        for _ in range(2):
            yield current_principal().name.encode()

    async def stream_unary(requests: AsyncIterator[bytes], context: Context) -> bytes:
        calls.append("stream_unary")
        return current_principal().name.encode()

    async def stream_stream(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        calls.append("stream_stream")
        async for _ in requests:
            yield current_principal().name.encode()

    def sync_unary(request: bytes, context: grpc.ServicerContext) -> bytes:
        calls.append("sync_unary")
        return b""

    handlers = {
        "UnaryStream": grpc.unary_stream_rpc_method_handler(unary_stream),
        "StreamUnary": grpc.stream_unary_rpc_method_handler(stream_unary),
        "StreamStream": grpc.stream_stream_rpc_method_handler(stream_stream),
        "SyncUnary": grpc.unary_unary_rpc_method_handler(sync_unary),
    }

    def register(server: grpc.aio.Server) -> Sequence[str]:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_FAKE, handlers),))
        return ()

    return register


def test_streaming_methods_are_guarded_and_see_the_principal() -> None:
    names = ("UnaryStream", "StreamUnary", "StreamStream", "SyncUnary")
    policy = {f"/{_FAKE}/{name}": frozenset({Role.OPERATOR}) for name in names}
    calls: list[str] = []

    async def scenario() -> None:
        async with (
            serve(_register_streams(calls), credentials=known_credentials(), policy=policy) as running,
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
        ):
            unary_stream = channel.unary_stream(f"/{_FAKE}/UnaryStream", None, None)
            stream_unary = channel.stream_unary(f"/{_FAKE}/StreamUnary", None, None)
            stream_stream = channel.stream_stream(f"/{_FAKE}/StreamStream", None, None)
            sync_unary = channel.unary_unary(f"/{_FAKE}/SyncUnary", None, None)
            assert [r async for r in unary_stream(b"", metadata=bearer("olga"))] == [b"olga", b"olga"]
            assert await stream_unary(iter([b"", b""]), metadata=bearer("olga")) == b"olga"
            assert [r async for r in stream_stream(iter([b"", b""]), metadata=bearer("olga"))] == [b"olga"] * 2
            for call in (
                unary_stream(b"", metadata=bearer("rita")),
                stream_stream(iter([b""]), metadata=bearer("rita")),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    _ = [r async for r in call]
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            code, _, _ = await refusal(stream_unary(iter([b""]), metadata=bearer("rita")))
            assert code == grpc.StatusCode.PERMISSION_DENIED
            # A synchronous behaviour cannot carry the principal, so it is refused, not served.
            code, _, _ = await refusal(sync_unary(b"", metadata=bearer("olga")))
            assert code == grpc.StatusCode.INTERNAL

    asyncio.run(scenario())
    assert calls == ["unary_stream", "stream_unary", "stream_stream"]


def test_exempt_prefixes_cover_reflection_v1_as_well() -> None:
    calls: list[str] = []

    async def info(request: bytes, context: Context) -> bytes:
        calls.append("v1")
        return b""

    def register(server: grpc.aio.Server) -> Sequence[str]:
        handler = grpc.unary_unary_rpc_method_handler(info)
        service = "grpc.reflection.v1.ServerReflection"
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {"Info": handler}),))
        return ()

    async def scenario() -> bytes:
        async with (
            serve(register, credentials=known_credentials()) as running,
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
        ):
            response: bytes = await channel.unary_unary("/grpc.reflection.v1.ServerReflection/Info", None, None)(b"")
            return response

    assert asyncio.run(scenario()) == b""
    assert calls == ["v1"]


def test_admit_decides_without_a_server() -> None:
    interceptor = AuthInterceptor(known_credentials(), RPC_ROLES)
    approve = REVIEW + "Approve"
    assert interceptor.admit(approve, bearer("rita"), {}) == token_principal("rita")
    # Header names arrive lower-cased from gRPC; the scheme is matched case-insensitively.
    assert interceptor.admit(approve, [("authorization", f"bearer {TOKENS['rita']}")], {}) == token_principal("rita")
    certificate = {"x509_common_name": [b"review-console"]}
    assert interceptor.admit(approve, (), certificate).via == "certificate"
    with pytest.raises(Unauthenticated, match="not a known principal"):
        interceptor.admit(approve, (), {"x509_common_name": [b"intruder"]})
    with pytest.raises(Unauthenticated, match="unknown bearer token"):
        interceptor.admit(approve, [("authorization", "Bearer nope")], certificate)  # a bad token is not skipped
