"""The OIDC verifier against the trial provider's real JWKS: how often keys are fetched (an unknown
kid at most once per 30 s, concurrent needs sharing one fetch, old keys fetched again and refused
when that fails), discovery, and how claims become a principal."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

import jwt
import pytest

from decisionflow_server.runtime.auth import (
    IdentityProviderUnavailable,
    JwksCache,
    JwtVerifier,
    Principal,
    Role,
    Unauthenticated,
)
from decisionflow_server.runtime.auth._jwt import KeysNeeded
from tests.support.oidc import AUDIENCE, oidc_config

if TYPE_CHECKING:
    from decisionflow_demo.trial_identity import TrialIdentityProvider


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _verify(verifier: JwtVerifier, token: str) -> Principal:
    """Verify token as the interceptor does: fetch the keys when asked to, then verify again."""
    try:
        return verifier.verify(token)
    except KeysNeeded as needed:
        asyncio.run(needed.refresh())
        return verifier.verify(token)


NOT_BEFORE_IN_TEN_MINUTES = object()


def _token(provider: TrialIdentityProvider, **overrides: object) -> str:
    now = int(time.time())
    claims: dict[str, object] = {"iss": provider.issuer, "aud": AUDIENCE, "sub": "rita", "iat": now, "exp": now + 300}
    claims.update(overrides)
    return provider.sign(claims)


def _verifier(provider: TrialIdentityProvider, clock: Clock, **overrides: object) -> JwtVerifier:
    config = oidc_config(provider, **overrides)
    verifier = JwtVerifier(config, JwksCache(config.issuer, config.jwks_url, clock=clock))
    asyncio.run(verifier.warm_up())
    return verifier


def test_an_unknown_kid_fetches_the_keys_at_most_once_per_30_seconds(trial_identity: TrialIdentityProvider) -> None:
    clock = Clock()
    verifier = _verifier(trial_identity, clock)
    assert verifier.cache.fetches == 1

    trial_identity.rotate_key()
    assert _verify(verifier, _token(trial_identity)).name == "rita"
    assert verifier.cache.fetches == 2

    trial_identity.rotate_key()
    token = _token(trial_identity)
    clock.now += 29
    with pytest.raises(Unauthenticated, match="not one of the issuer's keys"):
        _verify(verifier, token)
    assert verifier.cache.fetches == 2

    clock.now += 1
    assert _verify(verifier, token).name == "rita"
    assert verifier.cache.fetches == 3


def test_concurrent_needs_share_one_fetch(
    trial_identity: TrialIdentityProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    verifier = _verifier(trial_identity, Clock())
    # The fetch waits until all eight needs have arrived (on a loaded machine a quick fetch could
    # otherwise end between two of them, and the later ones rightly start a fetch of their own).
    arrived = threading.Event()
    load = verifier.cache._load

    def load_once_all_arrived() -> object:
        arrived.wait(10)
        return load()

    monkeypatch.setattr(verifier.cache, "_load", load_once_all_arrived)

    async def many() -> None:
        needs = [asyncio.ensure_future(verifier.cache.refresh(unknown_kid=True)) for _ in range(8)]
        await asyncio.sleep(0)  # each need runs up to its wait for the fetch
        arrived.set()
        await asyncio.gather(*needs)

    asyncio.run(many())
    assert verifier.cache.fetches == 2


def test_keys_past_their_age_are_fetched_again_and_refused_when_that_fails(
    trial_identity: TrialIdentityProvider,
) -> None:
    clock = Clock()
    verifier = _verifier(trial_identity, clock)
    token = _token(trial_identity)
    assert verifier.verify(token).name == "rita"  # from the cache, no fetch
    url = verifier.cache.url
    trial_identity.stop()

    clock.now += 3600
    with pytest.raises(IdentityProviderUnavailable) as unavailable:
        _verify(verifier, token)
    assert url in unavailable.value.message
    # Until the retry is due, refused at once without another fetch.
    with pytest.raises(IdentityProviderUnavailable):
        verifier.verify(token)
    assert verifier.cache.fetches == 2


def test_discovery_must_describe_the_configured_issuer(trial_identity: TrialIdentityProvider) -> None:
    verifier = _verifier(trial_identity, Clock(), issuer=trial_identity.issuer + "/")

    assert "is the document of issuer" in (verifier.cache.error or "")
    with pytest.raises(IdentityProviderUnavailable):
        verifier.verify(_token(trial_identity, iss=trial_identity.issuer + "/"))


@pytest.mark.parametrize(
    ("groups", "roles", "listed"),
    [
        (["reviewers", "authors", "visitors"], {Role.REVIEWER, Role.AUTHOR}, {"reviewers", "authors", "visitors"}),
        ("reviewers operators", {Role.REVIEWER, Role.OPERATOR}, {"reviewers", "operators"}),
        (["visitors"], set(), {"visitors"}),
        (None, set(), set()),
    ],
)
def test_groups_map_to_roles_and_unmapped_groups_grant_nothing(
    trial_identity: TrialIdentityProvider, groups: object, roles: set[Role], listed: set[str]
) -> None:
    verifier = _verifier(trial_identity, Clock())
    claims = {} if groups is None else {"groups": groups}

    principal = verifier.verify(_token(trial_identity, **claims))

    # Every group the claim lists is one of the principal's, whether or not it maps to a role.
    assert principal == Principal("rita", frozenset(roles), "oidc", frozenset(listed))


def test_groups_that_are_not_group_names_are_left_out_and_the_rest_hold(trial_identity: TrialIdentityProvider) -> None:
    verifier = _verifier(trial_identity, Clock())
    # Keycloak's full group paths and capitalised names could never match a review rule's group.
    listed = ["reviewers", "/support/leads", "Payments", "payments-leads", "", "x" * 65, "team.eu_2"]

    principal = verifier.verify(_token(trial_identity, groups=listed))

    assert principal.groups == frozenset({"reviewers", "payments-leads", "team.eu_2"})
    assert principal.roles == frozenset({Role.REVIEWER})


def test_roles_and_groups_come_from_their_own_claims_when_configured_apart(
    trial_identity: TrialIdentityProvider,
) -> None:
    # Entra ID's shape: app roles in "roles", group object ids in "groups".
    verifier = _verifier(trial_identity, Clock(), roles_claim="roles", groups_claim="groups")
    group_id = "3f0c5a52-4d1b-4b7e-9a57-0c6f2d9e8b11"

    principal = verifier.verify(_token(trial_identity, roles=["reviewers"], groups=[group_id, "authors"]))

    assert principal == Principal("rita", frozenset({Role.REVIEWER}), "oidc", frozenset({group_id, "authors"}))
    # The groups claim is read as strictly as the roles claim: one that is neither a list of strings nor a string
    # refuses the token, naming the claim.
    with pytest.raises(Unauthenticated, match="its groups claim is neither"):
        verifier.verify(_token(trial_identity, roles=["reviewers"], groups={"id": group_id}))


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"sub": "x" * 129}, "longer than 128"),
        ({"sub": " rita"}, "surrounding spaces"),
        ({"sub": None}, "sub claim"),
        ({"groups": {"reviewers": True}}, "groups claim"),
        ({"groups": ["reviewers", 7]}, "groups claim"),
        ({"exp": None}, "required claim"),
        ({"nbf": NOT_BEFORE_IN_TEN_MINUTES}, "not valid yet"),
    ],
)
def test_unusable_claims_are_unauthenticated(
    trial_identity: TrialIdentityProvider, claims: dict[str, object], message: str
) -> None:
    verifier = _verifier(trial_identity, Clock())
    if claims.get("nbf") is NOT_BEFORE_IN_TEN_MINUTES:
        # Ten minutes from when the test runs, not from when it was collected: a long suite passes ten minutes.
        claims = {**claims, "nbf": int(time.time()) + 600}
    token = _token(trial_identity, **claims)
    if claims.get("sub", "") is None or claims.get("exp", "") is None:
        # A missing claim, not a null one.
        payload = jwt.decode(token, options={"verify_signature": False})
        token = trial_identity.sign({k: v for k, v in payload.items() if v is not None})

    with pytest.raises(Unauthenticated, match=message):
        verifier.verify(token)


def test_the_leeway_admits_a_token_expired_within_it(trial_identity: TrialIdentityProvider) -> None:
    verifier = _verifier(trial_identity, Clock(), leeway_seconds=120)
    now = int(time.time())

    assert verifier.verify(_token(trial_identity, iat=now - 600, exp=now - 60)).name == "rita"
    with pytest.raises(Unauthenticated, match="expired"):
        verifier.verify(_token(trial_identity, iat=now - 600, exp=now - 180))


def test_a_symmetric_signature_is_refused_before_any_key_is_looked_up(trial_identity: TrialIdentityProvider) -> None:
    verifier = _verifier(trial_identity, Clock())
    now = int(time.time())
    claims = {"iss": trial_identity.issuer, "aud": AUDIENCE, "sub": "rita", "iat": now, "exp": now + 300}
    # HMAC keyed with the public key's text: the classic confusion of an RSA key with an HMAC secret.
    token = jwt.encode(claims, "x" * 64, algorithm="HS256", headers={"kid": trial_identity.kid})

    with pytest.raises(Unauthenticated, match="algorithm 'HS256'"):
        verifier.verify(token)
    assert verifier.cache.fetches == 1
