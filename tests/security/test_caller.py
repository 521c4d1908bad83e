"""GetCaller over real gRPC: the orchestrator tells each authenticated principal who it is, the
roles its policy grants it and the groups it belongs to (from the credentials file, or an OIDC
token's groups), through the raw stub and both light clients; a caller without credentials is refused
UNAUTHENTICATED, and one holding none of the orchestrator's roles PERMISSION_DENIED."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from decisionflow import reasons
from decisionflow.channels import insecure_channel, open_aio_channel
from decisionflow.client import AsyncReviewClient, Caller, PermissionDenied, ReviewClient, Role, Unauthenticated
from decisionflow.retry import NO_RETRY
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, review_pb2, review_pb2_grpc
from decisionflow_server.runtime.auth import bearer_metadata, issue_token
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.oidc import ROLE_MAP, oidc_config, start_oidc_stack
from tests.support.secure import SecureStack
from tests.support.stack import Stack

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider

# The credentials file's principals (tests.support.auth.ROLES) that hold an orchestrator role.
ADMITTED = {
    "rita": frozenset({Role.REVIEWER}),
    "arthur": frozenset({Role.AUTHOR}),
    "olga": frozenset({Role.OPERATOR}),
    "sam": frozenset({Role.REVIEWER, Role.AUTHOR}),
    "audrey": frozenset({Role.AUDITOR}),
}


def _caller(port: int, metadata: tuple[tuple[str, str], ...] = ()) -> Caller:
    """GetCaller through the synchronous light client, on a channel of its own."""
    with insecure_channel(f"127.0.0.1:{port}") as channel:
        return ReviewClient(channel, timeout=10, policy=NO_RETRY, metadata=metadata).get_caller()


def test_each_principal_is_told_its_own_name_and_roles(secure_stack: SecureStack) -> None:
    for name, roles in ADMITTED.items():
        assert _caller(secure_stack.stack.orchestrator_port, secure_stack.as_(name)) == Caller(name, roles), name
    # On the wire: each role once, in the order of the enum.
    answer = secure_stack.stack.review().GetCaller(
        review_pb2.GetCallerRequest(), metadata=secure_stack.as_("sam"), timeout=10
    )
    assert (answer.principal, list(answer.roles)) == ("sam", [common_pb2.ROLE_REVIEWER, common_pb2.ROLE_AUTHOR])


def test_a_token_is_told_the_groups_its_credentials_file_entry_lists(
    tmp_path: Path, make_stack: Callable[..., Stack]
) -> None:
    credentials = tmp_path / "credentials.json"
    pia = issue_token(credentials, "pia", [Role.REVIEWER], ["payments-leads", "emea"])
    rita = issue_token(credentials, "rita", [Role.REVIEWER])
    port = make_stack(security=ServerSecurity(credentials_file=credentials)).orchestrator_port

    # On the wire: each group once, sorted.
    with insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = review_pb2_grpc.ReviewServiceStub(channel)
        answer = stub.GetCaller(review_pb2.GetCallerRequest(), metadata=bearer_metadata(pia), timeout=10)
        assert list(answer.groups) == ["emea", "payments-leads"]
        answer = stub.GetCaller(review_pb2.GetCallerRequest(), metadata=bearer_metadata(rita), timeout=10)
        assert list(answer.groups) == []

    expected = Caller("pia", frozenset({Role.REVIEWER}), frozenset({"emea", "payments-leads"}))
    assert _caller(port, bearer_metadata(pia)) == expected
    assert _caller(port, bearer_metadata(rita)) == Caller("rita", frozenset({Role.REVIEWER}), frozenset())

    async def ask() -> Caller:
        channel = open_aio_channel(f"127.0.0.1:{port}")
        try:
            client = AsyncReviewClient(channel, timeout=10, policy=NO_RETRY, metadata=bearer_metadata(pia))
            return await client.get_caller()
        finally:
            await channel.close(None)

    assert asyncio.run(ask()).groups == frozenset({"emea", "payments-leads"})


def test_the_async_client_reads_the_same_caller(secure_stack: SecureStack) -> None:
    async def ask() -> Caller:
        channel = open_aio_channel(f"127.0.0.1:{secure_stack.stack.orchestrator_port}")
        try:
            client = AsyncReviewClient(channel, timeout=10, policy=NO_RETRY, metadata=secure_stack.as_("olga"))
            return await client.get_caller()
        finally:
            await channel.close(None)

    assert asyncio.run(ask()) == Caller("olga", frozenset({Role.OPERATOR}))


@pytest.mark.parametrize(
    "metadata",
    [(), (("authorization", "Bearer not-a-token-anyone-was-issued"),)],
    ids=["no credentials", "unknown token"],
)
def test_a_caller_without_credentials_is_refused_unauthenticated(
    secure_stack: SecureStack, metadata: tuple[tuple[str, str], ...]
) -> None:
    with pytest.raises(Unauthenticated) as refused:
        _caller(secure_stack.stack.orchestrator_port, metadata)
    assert refused.value.reason == reasons.UNAUTHENTICATED


@pytest.mark.parametrize("name", ["walter", "edna"])
def test_a_principal_with_only_receiver_roles_is_refused(secure_stack: SecureStack, name: str) -> None:
    with pytest.raises(PermissionDenied) as refused:
        _caller(secure_stack.stack.orchestrator_port, secure_stack.as_(name))
    assert refused.value.reason == reasons.PERMISSION_DENIED


def test_oidc_principals_get_the_roles_their_groups_map_to_and_their_groups(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    # "Night Shift" is no group name a review rule could use: left out, the token still admitted.
    trial_identity.set_user("ops", {"groups": ["visitors", "operators", "Night Shift"]})
    # Operators also read effects at the receiver: a receiver role is reported beside the orchestrator's.
    role_map = (*ROLE_MAP, ("operators", frozenset({Role.EFFECT_READER})))
    oidc = start_oidc_stack(tmp_path, trial_identity, oidc_config(trial_identity, role_map=role_map))
    port = oidc.stack.orchestrator_port
    try:
        assert _caller(port, oidc.as_user("rita")) == Caller(
            "rita", frozenset({Role.REVIEWER}), frozenset({"reviewers"})
        )
        assert _caller(port, oidc.as_user("sam")) == Caller(
            "sam", frozenset({Role.REVIEWER, Role.AUTHOR}), frozenset({"authors", "reviewers"})
        )
        # A group that maps to no role is still one of the person's groups.
        assert _caller(port, oidc.as_user("ops")) == Caller(
            "ops", frozenset({Role.OPERATOR, Role.EFFECT_READER}), frozenset({"operators", "visitors"})
        )
        answer = oidc.stack.review().GetCaller(review_pb2.GetCallerRequest(), metadata=oidc.as_user("ops"), timeout=10)
        assert list(answer.groups) == ["operators", "visitors"]
        # Groups that map to no role: signed in at the provider, but nobody to the orchestrator.
        with pytest.raises(grpc.RpcError) as refused:
            oidc.stack.review().GetCaller(review_pb2.GetCallerRequest(), metadata=oidc.as_user("nobody"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error_info(refused.value)[1][reasons.PRINCIPAL] == "nobody"
    finally:
        oidc.stack.close()


def test_without_authentication_every_caller_is_the_anonymous_principal(make_stack: Callable[..., Stack]) -> None:
    assert _caller(make_stack().orchestrator_port) == Caller("anonymous", frozenset(Role))
