"""Authentication and authorization for every decisionflow server and client.

_roles.py        Role, Principal, group names
_errors.py       Unauthenticated, IdentityProviderUnavailable, PermissionDenied, FourEyesViolation, AUTH_STATUS
_credentials.py  the credentials file (hashed bearer tokens, certificate principals)
_jwt.py          OIDC access tokens (JWTs): OidcConfig, JwtVerifier (claims to a principal, roles and groups)
_jwks.py         the issuer's signing keys, fetched off the event loop, cached and refreshed
_policy.py       RPC_ROLES, the roles allowed per RPC; the four-eyes rule
_server.py       AuthInterceptor (admission of a call), admitted() and current_principal()
_reload.py       CredentialsReloader: the credentials file read again (SIGHUP) and swapped in

The client side, bearer metadata and the interceptors that send it, is ``decisionflow.bearer`` in
the client distribution; it is re-exported here.
"""

from decisionflow.bearer import (
    AUTHORIZATION,
    BearerTokenInterceptor,
    SyncBearerTokenInterceptor,
    bearer_metadata,
)
from decisionflow_server.runtime.auth._credentials import (
    CertificateEntry,
    Credentials,
    CredentialsError,
    TokenEntry,
    check_principal_name,
    issue_token,
    load_credentials,
    parse_credentials,
    token_sha256,
)
from decisionflow_server.runtime.auth._errors import (
    AUTH_STATUS,
    AuthError,
    FourEyesViolation,
    IdentityProviderUnavailable,
    PermissionDenied,
    Unauthenticated,
)
from decisionflow_server.runtime.auth._jwks import ALLOWED_ALGORITHMS, JwksCache
from decisionflow_server.runtime.auth._jwt import JwtVerifier, OidcConfig, looks_like_jwt
from decisionflow_server.runtime.auth._policy import RPC_ROLES, all_rpc_methods, check_four_eyes, policy_gaps
from decisionflow_server.runtime.auth._reload import CredentialsReloader, principal_count
from decisionflow_server.runtime.auth._roles import (
    ALL_ROLES,
    ANONYMOUS,
    GROUP_NAME,
    ROLE_NAMES,
    Principal,
    Role,
    parse_group,
    parse_role,
)
from decisionflow_server.runtime.auth._server import (
    EXEMPT_METHOD_PREFIXES,
    AuthInterceptor,
    admitted,
    current_principal,
)

__all__ = [
    "ALLOWED_ALGORITHMS",
    "ALL_ROLES",
    "ANONYMOUS",
    "AUTHORIZATION",
    "AUTH_STATUS",
    "EXEMPT_METHOD_PREFIXES",
    "GROUP_NAME",
    "ROLE_NAMES",
    "RPC_ROLES",
    "AuthError",
    "AuthInterceptor",
    "BearerTokenInterceptor",
    "CertificateEntry",
    "Credentials",
    "CredentialsError",
    "CredentialsReloader",
    "FourEyesViolation",
    "IdentityProviderUnavailable",
    "JwksCache",
    "JwtVerifier",
    "OidcConfig",
    "PermissionDenied",
    "Principal",
    "Role",
    "SyncBearerTokenInterceptor",
    "TokenEntry",
    "Unauthenticated",
    "admitted",
    "all_rpc_methods",
    "bearer_metadata",
    "check_four_eyes",
    "check_principal_name",
    "current_principal",
    "issue_token",
    "load_credentials",
    "looks_like_jwt",
    "parse_credentials",
    "parse_group",
    "parse_role",
    "policy_gaps",
    "principal_count",
    "token_sha256",
]
