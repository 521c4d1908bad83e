"""RPC_ROLES against the contract, every method against every identity on a real server, and four-eyes."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from decisionflow import reasons
from decisionflow_server.runtime.auth import (
    AUTH_STATUS,
    RPC_ROLES,
    FourEyesViolation,
    PermissionDenied,
    Role,
    all_rpc_methods,
    check_four_eyes,
    policy_gaps,
)
from decisionflow_server.runtime.rpc_errors import code_for
from tests.support.auth import ROLES, TOKENS, ContractRecorder, bearer, known_credentials, serve
from tests.support.secure import raw_call_aio

# Written from the specification, independently of RPC_ROLES, so that a slip in either shows up.
EXPECTED_ROLES: dict[str, set[str]] = {
    "/decisionflow.v1.ReviewService/StartReview": {"author"},
    "/decisionflow.v1.ReviewService/EditProposal": {"author"},
    "/decisionflow.v1.ReviewService/GetProposal": {"reviewer", "author", "operator"},
    # An auditor reads the orchestrator's record of the operations it audits.
    "/decisionflow.v1.ReviewService/GetOperation": {"reviewer", "author", "operator", "auditor"},
    "/decisionflow.v1.ReviewService/ListPendingReviews": {"reviewer", "author", "operator"},
    "/decisionflow.v1.ReviewService/Approve": {"reviewer"},
    # Whoever holds a role of the orchestrator may ask who they are.
    "/decisionflow.v1.ReviewService/GetCaller": {"reviewer", "author", "operator", "auditor"},
    "/decisionflow.v1.OperationsService/ListOperations": {"operator"},
    "/decisionflow.v1.OperationsService/SettleOperation": {"operator"},
    "/decisionflow.v1.OperationsService/BatchSettleOperations": {"operator"},
    "/decisionflow.v1.OperationsService/RedriveOperation": {"operator"},
    "/decisionflow.v1.EffectReceiverService/Apply": {"effect_writer"},
    "/decisionflow.v1.EffectReceiverService/Lookup": {"effect_reader"},
    "/decisionflow.v1.EffectReceiverService/BatchLookup": {"effect_reader"},
    "/decisionflow.v1.EffectReceiverService/ListEffects": {"effect_reader"},
    # The audit log: read by auditors and operators; nothing in it changes anything.
    "/decisionflow.v1.AuditService/GetCheckpoint": {"auditor", "operator"},
    "/decisionflow.v1.AuditService/GetInclusionProof": {"auditor", "operator"},
    "/decisionflow.v1.AuditService/GetConsistencyProof": {"auditor", "operator"},
    "/decisionflow.v1.AuditService/ListLeaves": {"auditor", "operator"},
    # The event feed: auditors and operators watch every case, an author the cases they proposed in.
    "/decisionflow.v1.EventService/WatchEvents": {"author", "auditor", "operator"},
}


def test_rpc_roles_names_exactly_the_rpcs_of_the_contract() -> None:
    assert policy_gaps(RPC_ROLES) == ([], [])
    assert sorted(RPC_ROLES) == all_rpc_methods()
    assert len(all_rpc_methods()) == 20


def test_policy_gaps_reports_missing_and_unknown_methods() -> None:
    policy = dict(RPC_ROLES)
    del policy["/decisionflow.v1.ReviewService/Approve"]
    policy["/decisionflow.v1.ReviewService/Approv"] = frozenset({Role.REVIEWER})
    assert policy_gaps(policy) == (
        ["/decisionflow.v1.ReviewService/Approve"],
        ["/decisionflow.v1.ReviewService/Approv"],
    )


def test_rpc_roles_matches_the_specification() -> None:
    assert {method: {role.value for role in roles} for method, roles in RPC_ROLES.items()} == EXPECTED_ROLES


def test_every_method_times_every_identity_on_a_real_server() -> None:
    identities = [*TOKENS, None]  # None: a call without credentials
    recorder = ContractRecorder()

    async def scenario() -> dict[tuple[str, str | None], grpc.StatusCode]:
        outcomes: dict[tuple[str, str | None], grpc.StatusCode] = {}
        async with (
            serve(recorder.register, credentials=known_credentials()) as running,
            grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel,
        ):
            for method in all_rpc_methods():
                for name in identities:
                    code, _ = await raw_call_aio(channel, method, b"", () if name is None else bearer(name))
                    outcomes[method, name] = code
        return outcomes

    outcomes = asyncio.run(scenario())
    assert len(outcomes) == len(EXPECTED_ROLES) * len(identities)
    admitted = []
    for method, allowed in EXPECTED_ROLES.items():
        assert outcomes[method, None] == grpc.StatusCode.UNAUTHENTICATED, method
        for name, roles in ROLES.items():
            may_call = bool(allowed & {role.value for role in roles})
            expected = grpc.StatusCode.OK if may_call else grpc.StatusCode.PERMISSION_DENIED
            assert outcomes[method, name] == expected, (method, name)
            if may_call:
                admitted.append((method, name))
    # The handler ran for exactly the admitted calls, and saw the caller's principal each time.
    assert sorted((method, p.name) for method, p in recorder.calls) == sorted(admitted)


def _four_eyes_refusal(author: str, reviewer: str, enabled: bool) -> FourEyesViolation | None:
    """Return the refusal check_four_eyes raises, or None when it admits the reviewer."""
    try:
        check_four_eyes({author}, reviewer, enabled)
    except FourEyesViolation as refused:
        return refused
    return None


@pytest.mark.parametrize(
    ("author", "reviewer", "enabled", "refused"),
    [
        ("arthur", "rita", True, False),
        ("arthur", "arthur", False, False),
        ("arthur", "arthur", True, True),
        # Names are compared exactly: these are distinct principals in the credentials file.
        ("arthur", "Arthur", True, False),
        ("arthur", "arthur ", True, False),
    ],
)
def test_four_eyes_refuses_only_the_author_and_only_when_enabled(
    author: str, reviewer: str, enabled: bool, refused: bool
) -> None:
    refusal = _four_eyes_refusal(author, reviewer, enabled)
    assert (refusal is not None) is refused
    if refusal is not None:
        assert (refusal.reason, refusal.metadata) == (reasons.FOUR_EYES, {reasons.PRINCIPAL: reviewer})


def test_a_four_eyes_refusal_is_a_permission_denied() -> None:
    refusal = _four_eyes_refusal("arthur", "arthur", enabled=True)
    assert isinstance(refusal, PermissionDenied)
    assert code_for(AUTH_STATUS, refusal) == grpc.StatusCode.PERMISSION_DENIED
