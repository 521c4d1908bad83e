"""OIDC access tokens from a real provider (the trial one, running in the test) against a real
receiver and orchestrator: admitted with the roles their groups map to and recorded under their
subject; refused with UNAUTHENTICATED when expired, tampered, for another audience or from another
issuer; refused with UNAVAILABLE while the issuer's keys cannot be fetched; a rotated key followed.
Static tokens keep working beside them, and the four-eyes rule applies to an OIDC author."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from decisionflow import reasons
from decisionflow.status_details import error_info
from decisionflow.v1 import common_pb2, effect_receiver_pb2, review_pb2
from tests.security.dbstate import snapshot
from tests.support.oidc import AUDIENCE, OidcStack, oidc_config, start_oidc_stack
from tests.support.stack import approve, start_request

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider


def _refused(stack: OidcStack, metadata: tuple[tuple[str, str], ...]) -> grpc.RpcError:
    """StartReview with metadata must be refused and write nothing; return the refusal."""
    before = (snapshot(stack.stack.orchestrator_url), snapshot(stack.stack.receiver_url))
    with pytest.raises(grpc.RpcError) as refused:
        stack.stack.review().StartReview(start_request(), metadata=metadata, timeout=15)
    assert (snapshot(stack.stack.orchestrator_url), snapshot(stack.stack.receiver_url)) == before
    return refused.value


def _claims(provider: TrialIdentityProvider, **overrides: object) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {
        "iss": provider.issuer,
        "aud": AUDIENCE,
        "sub": "arthur",
        "iat": now,
        "exp": now + 300,
        "groups": ["authors"],
    }
    claims.update(overrides)
    return claims


def test_a_token_with_mapped_groups_is_admitted_and_its_subject_is_the_recorded_reviewer(
    oidc_stack: OidcStack,
) -> None:
    review = oidc_stack.stack.review()
    started = review.StartReview(start_request(), metadata=oidc_stack.as_user("arthur"), timeout=15)
    assert started.proposal.created_by == "arthur"

    answer = review.Approve(approve(started.proposal.operation_id), metadata=oidc_stack.as_user("rita"), timeout=15)

    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "rita")
    effects = oidc_stack.stack.receiver().ListEffects(
        effect_receiver_pb2.ListEffectsRequest(case_id="T-1042"), metadata=oidc_stack.as_static("edna"), timeout=10
    )
    assert [(e.operation_id, e.reviewer) for e in effects.effects] == [(started.proposal.operation_id, "rita")]


def test_the_configured_subject_claim_names_the_principal(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    started = start_oidc_stack(tmp_path, trial_identity, oidc_config(trial_identity, subject_claim="email"))
    try:
        proposal = started.stack.review().StartReview(start_request(), metadata=started.as_user("sam"), timeout=15)
        assert proposal.proposal.created_by == "sam@example.com"
    finally:
        started.stack.close()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("expired", "expired"),
        ("tampered", "signature"),
        ("other audience", "aud"),
        ("other issuer", "iss"),
        ("algorithm none", "algorithm"),
    ],
)
def test_an_invalid_token_is_unauthenticated_and_writes_nothing(
    oidc_stack: OidcStack, trial_identity: TrialIdentityProvider, case: str, message: str
) -> None:
    if case == "expired":
        # Past the 60 s leeway.
        token = trial_identity.sign(_claims(trial_identity, iat=int(time.time()) - 600, exp=int(time.time()) - 120))
    elif case == "tampered":
        header, payload, signature = trial_identity.access_token("arthur").split(".")
        # Another payload under the original signature: sam claims arthur's signature.
        forged = trial_identity.sign(_claims(trial_identity, sub="sam")).split(".")[1]
        assert forged != payload
        token = ".".join((header, forged, signature))
    elif case == "other audience":
        token = trial_identity.sign(_claims(trial_identity, aud="another-service"))
    elif case == "other issuer":
        token = trial_identity.sign(_claims(trial_identity, iss="https://issuer.example"))
    else:
        unsigned = trial_identity.sign(_claims(trial_identity)).split(".")
        token = ".".join(("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0", unsigned[1], ""))  # {"alg":"none","typ":"JWT"}

    refusal = _refused(oidc_stack, (("authorization", f"Bearer {token}"),))

    assert refusal.code() == grpc.StatusCode.UNAUTHENTICATED, refusal.details()
    assert message in (refusal.details() or "")
    assert error_info(refusal)[0] == reasons.UNAUTHENTICATED


def test_a_token_without_a_mapped_role_is_permission_denied(oidc_stack: OidcStack) -> None:
    refusal = _refused(oidc_stack, oidc_stack.as_user("nobody"))

    assert refusal.code() == grpc.StatusCode.PERMISSION_DENIED, refusal.details()
    assert error_info(refusal)[1].get(reasons.PRINCIPAL) == "nobody"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_jwks_is_unavailable_names_the_url_and_writes_nothing(
    tmp_path: Path, trial_identity: TrialIdentityProvider
) -> None:
    jwks_url = f"http://127.0.0.1:{_closed_port()}/jwks"
    started = start_oidc_stack(tmp_path, trial_identity, oidc_config(trial_identity, jwks_url=jwks_url))
    try:
        token = trial_identity.access_token("arthur")
        refusal = _refused(started, (("authorization", f"Bearer {token}"),))

        assert refusal.code() == grpc.StatusCode.UNAVAILABLE, refusal.details()
        assert jwks_url in (refusal.details() or "")
        assert error_info(refusal)[0] == reasons.UNAVAILABLE
        # The static tokens do not depend on the issuer.
        answer = started.stack.review().StartReview(start_request(), metadata=started.as_static("arthur"), timeout=15)
        assert answer.proposal.created_by == "arthur"
    finally:
        started.stack.close()


def test_a_rotated_key_is_followed_and_a_token_without_kid_needs_a_single_key(
    oidc_stack: OidcStack, trial_identity: TrialIdentityProvider
) -> None:
    review = oidc_stack.stack.review()
    # One key published: a token naming no key is checked with it.
    no_kid = trial_identity.sign(_claims(trial_identity), kid=False)
    started = review.StartReview(start_request(), metadata=(("authorization", f"Bearer {no_kid}"),), timeout=15)
    assert started.proposal.created_by == "arthur"

    old_kid = trial_identity.kid
    assert trial_identity.rotate_key() != old_kid
    # The new key is not cached yet: the servers fetch the keys again and admit the token.
    answer = review.Approve(approve(started.proposal.operation_id), metadata=oidc_stack.as_user("rita"), timeout=15)
    assert (answer.outcome, answer.operation.reviewer) == (common_pb2.OUTCOME_COMMITTED, "rita")

    # Two keys published now: which one a token without kid means would be a guess.
    no_kid = trial_identity.sign(_claims(trial_identity, sub="sam"), kid=False)
    refusal = _refused(oidc_stack, (("authorization", f"Bearer {no_kid}"),))
    assert refusal.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "kid" in (refusal.details() or "")


def test_static_tokens_still_work_beside_oidc(oidc_stack: OidcStack) -> None:
    review = oidc_stack.stack.review()
    started = review.StartReview(start_request(), metadata=oidc_stack.as_static("arthur"), timeout=15)
    answer = review.Approve(approve(started.proposal.operation_id), metadata=oidc_stack.as_static("rita"), timeout=15)

    assert (started.proposal.created_by, answer.operation.reviewer) == ("arthur", "rita")
    refusal = _refused(oidc_stack, (("authorization", "Bearer not-a-known-token"),))
    assert refusal.code() == grpc.StatusCode.UNAUTHENTICATED


def test_four_eyes_applies_to_an_oidc_author(tmp_path: Path, trial_identity: TrialIdentityProvider) -> None:
    started = start_oidc_stack(tmp_path, trial_identity, four_eyes=True)
    try:
        review = started.stack.review()
        proposal = review.StartReview(start_request(), metadata=started.as_user("sam"), timeout=15).proposal
        before = snapshot(started.stack.orchestrator_url)
        with pytest.raises(grpc.RpcError) as refused:
            review.Approve(approve(proposal.operation_id), metadata=started.as_user("sam"), timeout=15)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error_info(refused.value)[:2] == (reasons.FOUR_EYES, {reasons.PRINCIPAL: "sam"})
        assert snapshot(started.stack.orchestrator_url) == before

        answer = review.Approve(approve(proposal.operation_id), metadata=started.as_user("rita"), timeout=15)
        assert answer.operation.reviewer == "rita"
    finally:
        started.stack.close()


def test_get_proposal_reads_with_an_oidc_token(oidc_stack: OidcStack) -> None:
    review = oidc_stack.stack.review()
    started = review.StartReview(start_request(), metadata=oidc_stack.as_user("arthur"), timeout=15)
    found = review.GetProposal(
        review_pb2.GetProposalRequest(operation_id=started.proposal.operation_id),
        metadata=oidc_stack.as_user("rita"),
        timeout=15,
    )
    assert found.proposal.operation_id == started.proposal.operation_id
