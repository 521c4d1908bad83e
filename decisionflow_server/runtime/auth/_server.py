"""Admission of every call (bearer token from the credentials file, OIDC access
token, or verified client certificate): who the caller is, whether
the method's roles admit it, and the principal made available to servicer code (``admitted``,
``current_principal``). The server's one pass per call (``decisionflow_server.runtime.served_calls``) asks
``AuthInterceptor.admission`` from the call's headers, then ``admit_in_call`` when only the client
certificate can tell.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterable, Iterator, Mapping

from decisionflow import reasons
from decisionflow_server.foundation.handlers import Context
from decisionflow_server.runtime.auth._credentials import Credentials
from decisionflow_server.runtime.auth._errors import AuthError, PermissionDenied, Unauthenticated
from decisionflow_server.runtime.auth._jwt import JwtVerifier, KeysNeeded, looks_like_jwt
from decisionflow_server.runtime.auth._roles import ANONYMOUS, Principal, Role

logger = logging.getLogger(__name__)

EXEMPT_METHOD_PREFIXES: tuple[str, ...] = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar("decisionflow_principal")


def current_principal() -> Principal:
    """Return the principal admitted for the RPC being handled; outside one, raise Unauthenticated."""
    try:
        return _principal.get()
    except LookupError:
        # Fail closed: a server wired without AuthInterceptor refuses instead of guessing a caller.
        raise Unauthenticated("no authenticated principal for this call") from None


def _bearer_token(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    values = [value for key, value in metadata if key.lower() == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise Unauthenticated("more than one authorization header")
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("the authorization header must be 'Bearer <token>'")
    return token


def _certificate_names(auth_context: Mapping[str, Iterable[bytes]]) -> list[str]:
    # The transport fills these only for a peer certificate it verified against the client CA.
    names: list[str] = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names.extend(value.decode("utf-8", "replace") for value in auth_context.get(key, ()))
    return names


class AuthInterceptor:
    """Authenticates each call and admits it only if the principal holds a role the policy allows
    for the method; health and reflection are exempt, methods absent from the policy are refused."""

    def __init__(
        self,
        credentials: Credentials | None,
        policy: Mapping[str, frozenset[Role]],
        *,
        client_certificates: bool = True,
        oidc: JwtVerifier | None = None,
    ) -> None:
        """client_certificates False says the transport never verifies a client certificate (no
        client CA), so a call without a token is refused from its headers alone. oidc also admits
        OIDC access tokens (JWTs) its issuer signed; credentials may then be None."""
        self._credentials = credentials
        self._policy = dict(policy)
        self._client_certificates = client_certificates
        self._oidc = oidc

    @property
    def authenticated(self) -> bool:
        """True when callers must present credentials (False: everyone is the anonymous principal)."""
        return self._credentials is not None or self._oidc is not None

    async def warm_up(self) -> None:
        """Fetch the OIDC issuer's signing keys ahead of the first token (nothing to do without OIDC)."""
        if self._oidc is not None:
            await self._oidc.warm_up()

    def replace_credentials(self, credentials: Credentials) -> None:
        """Authenticate every call from now on against credentials (a call already admitted keeps its
        principal); an interceptor built without credentials cannot be given some."""
        if self._credentials is None:
            raise ValueError("authentication is off: there are no credentials to replace")
        # One reference swapped at once: each call reads it once, so it sees the old set or the new one.
        self._credentials = credentials

    def _certificates(self, credentials: Credentials | None) -> bool:
        return self._client_certificates and credentials is not None and bool(credentials.certificates)

    def admit(
        self,
        method: str,
        metadata: Iterable[tuple[str, str | bytes]],
        auth_context: Mapping[str, Iterable[bytes]],
    ) -> Principal:
        """Return the caller's principal if it may call method; raise Unauthenticated or PermissionDenied
        (or, for an OIDC token, IdentityProviderUnavailable, or KeysNeeded when keys must be fetched first)."""
        principal = self._authenticate(metadata, auth_context)
        allowed = self._policy.get(method)
        if allowed is None:
            raise PermissionDenied(f"{method} is not in the authorization policy", metadata={reasons.RPC: method})
        if not principal.has_any(allowed):
            required = ",".join(sorted(role.value for role in allowed))
            raise PermissionDenied(
                f"{principal.name!r} may not call {method} (needs one of: {required})",
                metadata={reasons.RPC: method, reasons.PRINCIPAL: principal.name, reasons.REQUIRED_ROLES: required},
            )
        return principal

    def _authenticate(
        self, metadata: Iterable[tuple[str, str | bytes]], auth_context: Mapping[str, Iterable[bytes]]
    ) -> Principal:
        credentials = self._credentials
        if credentials is None and self._oidc is None:
            return ANONYMOUS
        # An explicit token wins over the transport's certificate; a bad token is refused, not skipped.
        token = _bearer_token(metadata)
        if token is not None:
            principal = None if credentials is None else credentials.principal_for_token(token)
            if principal is None:
                # Only a token the credentials file does not know is tried as a JWT: the file's
                # tokens cost exactly what they did before OIDC.
                if self._oidc is not None and looks_like_jwt(token):
                    return self._oidc.verify(token)
                raise Unauthenticated("unknown bearer token")
            return principal
        names = _certificate_names(auth_context)
        if names and credentials is not None:
            principal = credentials.principal_for_certificate(names)
            if principal is None:
                raise Unauthenticated(f"client certificate {names[0]!r} is not a known principal")
            return principal
        raise Unauthenticated("credentials required: 'authorization: Bearer <token>' or a client certificate")

    def admit_in_call(self, method: str, context: Context) -> Principal:
        """Return the caller's principal from inside the call (where the transport's verified client
        certificate is known); raise and log Unauthenticated or PermissionDenied."""
        try:
            return self.admit(method, context.invocation_metadata() or (), context.auth_context())
        except AuthError as error:
            _log_refusal(method, error)
            # Answered by the server's status table (decisionflow_server.runtime.rpc_errors.refuse).
            raise

    def _admit_early(self, method: str, metadata: Iterable[tuple[str, str | bytes]]) -> Principal | AuthError | None:
        """Return the caller's principal, or the refusal, when the call's headers settle it; None
        when only the transport's certificate can (known inside the call). Raises KeysNeeded when an
        OIDC token can be decided only once the issuer's keys are fetched."""
        try:
            if self._certificates(self._credentials) and _bearer_token(metadata) is None:
                return None
            # A token wins over a certificate; where no certificate can authenticate, no token is a refusal.
            return self.admit(method, metadata, {})
        except AuthError as error:
            _log_refusal(method, error)
            return error

    async def admission(self, method: str, metadata: Iterable[tuple[str, str | bytes]]) -> Principal | AuthError | None:
        """Return the caller's principal, or the refusal (logged), when the call's headers settle it;
        None when only the transport's certificate can (``admit_in_call`` decides inside the call)."""
        try:
            return self._admit_early(method, metadata)
        except KeysNeeded as needed:
            # An OIDC token whose key is not cached: fetched here, off the loop, then decided again.
            await needed.refresh()
            try:
                return self._admit_early(method, metadata)
            except KeysNeeded:
                refusal = Unauthenticated("OIDC token refused: its signing key is not one of the issuer's keys")
                _log_refusal(method, refusal)
                return refusal


@contextlib.contextmanager
def admitted(principal: Principal | None, *, lenient: bool = False) -> Iterator[None]:
    """Make principal the one ``current_principal`` returns inside the block (None: leave it unset);
    lenient: a block left in another context (an abandoned async generator) leaves it set there.

    Set by the served call's behaviour, inside the call that runs the servicer: grpc.aio does not
    promise that ``intercept_service`` runs in the handler's task, so a variable set there could be
    invisible to the servicer, or visible to another call."""
    if principal is None:
        yield
        return
    reset = _principal.set(principal)
    try:
        yield
    finally:
        if lenient:
            with contextlib.suppress(ValueError):
                _principal.reset(reset)
        else:
            _principal.reset(reset)


def _log_refusal(method: str, error: AuthError) -> None:
    logger.warning(
        "refused %s: %s",
        method,
        error.message,
        extra={
            "rpc": method,
            "reason": error.reason,
            "outcome": "refused",
            "principal": error.metadata.get(reasons.PRINCIPAL),
        },
    )
