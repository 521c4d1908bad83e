"""Authentication and authorization refusals.

    DomainError                      (decisionflow_server.foundation.errors)
    └── AuthError                    base of every refusal made here
        ├── Unauthenticated          UNAUTHENTICATED: no credentials, or none that are recognised
        ├── IdentityProviderUnavailable
        │                            UNAVAILABLE: the issuer's signing keys cannot be fetched (retry)
        └── PermissionDenied         PERMISSION_DENIED: authenticated, but not allowed
            └── FourEyesViolation    PERMISSION_DENIED, reason FOUR_EYES: the author cannot approve

``AUTH_STATUS`` maps them to the status codes their reasons are declared with; every server merges it
into its own ``StatusTable``,
through which ``AuthInterceptor``'s refusals are answered like any other domain error.
"""

from __future__ import annotations

from decisionflow import reasons
from decisionflow_server.foundation.errors import DomainError
from decisionflow_server.runtime.rpc_errors import StatusTable, status_table


class AuthError(DomainError):
    """Base of the authentication and authorization refusals."""


class Unauthenticated(AuthError):
    """The call carries no credentials, or credentials that are not recognised."""

    reason = reasons.UNAUTHENTICATED


class IdentityProviderUnavailable(AuthError):
    """An OIDC token cannot be checked: the issuer's signing keys (its JWKS) cannot be fetched."""

    # Nothing was decided about the caller: a retry may be admitted once the keys can be fetched.
    reason = reasons.UNAVAILABLE

    def __init__(self, jwks_url: str, cause: str) -> None:
        super().__init__(f"cannot check the OIDC token: the signing keys at {jwks_url} cannot be fetched ({cause})")
        self.jwks_url = jwks_url


class PermissionDenied(AuthError):
    """The principal is known but holds none of the roles the method allows."""

    reason = reasons.PERMISSION_DENIED


class FourEyesViolation(PermissionDenied):
    """The reviewer is the author of the proposal and the four-eyes rule is on."""

    reason = reasons.FOUR_EYES

    def __init__(self, principal: str) -> None:
        super().__init__(
            f"four-eyes rule: {principal!r} authored this proposal and cannot decide it",
            metadata={reasons.PRINCIPAL: principal},
        )
        self.principal = principal


AUTH_STATUS: StatusTable = status_table(AuthError)
