"""OIDC access tokens (JWTs) as principals: the signature checked against the issuer's keys
(``_jwks``), then ``iss``, ``aud``, ``exp``, ``nbf`` and ``iat``; the principal named by a claim
(``sub`` by default), given the roles its groups map to and the groups its groups claim lists (those
that are valid group names).

``JwtVerifier.verify`` never does I/O. When the keys must be fetched first it raises ``KeysNeeded``,
which the caller (``AuthInterceptor.intercept_service``) answers by awaiting ``refresh`` and verifying
again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from decisionflow_server.runtime.auth._credentials import CredentialsError, check_principal_name
from decisionflow_server.runtime.auth._errors import IdentityProviderUnavailable, Unauthenticated
from decisionflow_server.runtime.auth._jwks import ALLOWED_ALGORITHMS, Fetch, JwksCache, Unavailable
from decisionflow_server.runtime.auth._roles import GROUP_NAME, Principal, Role

logger = logging.getLogger("decisionflow.auth")

RoleMap = tuple[tuple[str, frozenset[Role]], ...]


@dataclass(frozen=True, slots=True)
class OidcConfig:
    """Which issuer's tokens are accepted, for which audience, and how claims become a principal."""

    issuer: str
    """Must equal the token's ``iss``; its discovery document names the JWKS unless jwks_url is set."""
    audience: str
    """Must be one of the token's ``aud``."""
    jwks_url: str | None = None
    roles_claim: str = "groups"
    """A list of strings, or one space-separated string, each looked up in role_map."""
    role_map: RoleMap = ()
    """(group, roles) pairs; a group not listed grants nothing."""
    groups_claim: str = "groups"
    """A list of strings, or one space-separated string: the principal's groups, those that are valid
    group names (Keycloak's and Entra ID's ``groups`` claim, which roles_claim also names by default)."""
    subject_claim: str = "sub"
    """The claim whose value is the principal's name (recorded as author or reviewer)."""
    leeway_seconds: float = 60.0
    """Clock skew allowed when checking ``exp``, ``nbf`` and ``iat``."""

    def roles_for(self, groups: list[str]) -> frozenset[Role]:
        """Return the roles granted by groups (unmapped groups grant none)."""
        wanted = set(groups)
        return frozenset(role for group, roles in self.role_map if group in wanted for role in roles)


def looks_like_jwt(token: str) -> bool:
    """Return True when token has the shape of a JWS in compact form (three dot-separated parts)."""
    return token.count(".") == 2


class KeysNeeded(Exception):
    """The token can be checked only once the issuer's keys are fetched: await ``refresh()``, then verify again."""

    def __init__(self, verifier: JwtVerifier, *, unknown_kid: bool) -> None:
        super().__init__("the issuer's signing keys must be fetched")
        self._verifier = verifier
        self._unknown_kid = unknown_kid

    async def refresh(self) -> None:
        """Fetch the keys (off the event loop); a failure is reported by the next verify."""
        await self._verifier.cache.refresh(unknown_kid=self._unknown_kid)


_REFUSALS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet"),
    (jwt.InvalidAudienceError, "the token is not for this service (aud)"),
    (jwt.InvalidIssuerError, "the token is from another issuer (iss)"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim"),
    (jwt.InvalidIssuedAtError, "the token's iat is not a valid time"),
    (jwt.InvalidAlgorithmError, "the token's algorithm does not match its key"),
)


class JwtVerifier:
    """Turns an OIDC access token into a Principal (via ``"oidc"``), or refuses it."""

    def __init__(self, config: OidcConfig, cache: JwksCache | None = None) -> None:
        self.config = config
        self.cache = cache or JwksCache(config.issuer, config.jwks_url)

    async def warm_up(self) -> None:
        """Fetch the keys once (at server start); a failure is logged and retried when a token needs them."""
        await self.cache.refresh()
        if self.cache.error is None:
            logger.info("OIDC tokens accepted from %s (signing keys from %s)", self.config.issuer, self.cache.url)
        else:
            logger.warning(
                "OIDC signing keys not fetched at start (%s): %s; tokens are refused with UNAVAILABLE until they are",
                self.cache.url,
                self.cache.error,
            )

    def verify(self, token: str) -> Principal:
        """Return the token's principal; raise Unauthenticated for a token that is not valid here,
        IdentityProviderUnavailable when the keys cannot be fetched, KeysNeeded when they must be first."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("OIDC token refused: not a well-formed JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALLOWED_ALGORITHMS:
            raise Unauthenticated(f"OIDC token refused: algorithm {algorithm!r} is not accepted")
        if kid is not None and not isinstance(kid, str):
            raise Unauthenticated("OIDC token refused: its kid is not a string")
        try:
            key = self.cache.plan(kid)
        except Fetch as fetch:
            raise KeysNeeded(self, unknown_kid=fetch.unknown_kid) from None
        except Unavailable as unavailable:
            raise IdentityProviderUnavailable(self.cache.url, str(unavailable)) from None
        if key is None:
            if kid is None:
                raise Unauthenticated("OIDC token refused: it names no key (kid) and the issuer has several")
            raise Unauthenticated(f"OIDC token refused: signing key {kid!r} is not one of the issuer's keys")
        return self._principal(self._claims(token, key))

    def _claims(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        config = self.config
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                audience=config.audience,
                issuer=config.issuer,
                leeway=config.leeway_seconds,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            for kind, message in _REFUSALS:
                if isinstance(exc, kind):
                    raise Unauthenticated(f"OIDC token refused: {message}") from None
            raise Unauthenticated("OIDC token refused: not a valid token") from None

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        config = self.config
        try:
            name = check_principal_name(claims.get(config.subject_claim), f"the token's {config.subject_claim} claim")
        except CredentialsError as exc:
            raise Unauthenticated(f"OIDC token refused: {exc}") from None
        roles = config.roles_for(_strings(claims.get(config.roles_claim), config.roles_claim))
        # A group no review rule could name (a Keycloak path such as /org/team, a capitalised name) is
        # left out rather than refusing the token: it could only ever fail to match, and the person's
        # other groups and roles still hold.
        listed = _strings(claims.get(config.groups_claim), config.groups_claim)
        groups = frozenset(group for group in listed if GROUP_NAME.fullmatch(group))
        return Principal(name, roles, "oidc", groups)


def _strings(value: object, claim: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(group, str) for group in value):
        return list(value)
    raise Unauthenticated(f"OIDC token refused: its {claim} claim is neither a list of strings nor a string")
