"""Client channels with the project's fixed options (see the client guide and the security page in docs/).

Every channel has gRPC's own retries off, so tenacity (``decisionflow.retry``) is the only
retry layer and a server sees exactly one call per attempt, and a 1 MiB message limit in
both directions. Interceptors are applied in the order given. Every channel also reconnects
promptly after a server comes back (``RECONNECT_OPTIONS``) and spreads its calls over every address
its target resolves to or lists (``BALANCING_OPTIONS``; a target may be a comma-separated list of IP
addresses, ``decisionflow.addresses``); a caller may override either.

``open_channel`` and ``open_aio_channel`` are how a caller reaches a service: TLS when given a
CA file, a CLIENT span per call whose W3C ``traceparent`` travels in the call's metadata when the
process has the OpenTelemetry API installed and an SDK set up (``decisionflow.client_tracing``;
nothing otherwise), and a
bearer token attached to every call by the auth interceptors (call credentials
would need TLS, and loopback deployments run without it). A token is a password: without a CA
file it is sent only to a loopback target (decided by the literal host, see
``decisionflow.addresses``), unless the caller opts in with ``allow_cleartext_token=True``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import grpc

from decisionflow.addresses import grpc_target, is_loopback
from decisionflow.bearer import BearerTokenInterceptor, SyncBearerTokenInterceptor
from decisionflow.tls import StrPath, channel_credentials

if TYPE_CHECKING:
    ClientInterceptor: TypeAlias = (
        grpc.UnaryUnaryClientInterceptor[Any, Any]
        | grpc.UnaryStreamClientInterceptor[Any, Any]
        | grpc.StreamUnaryClientInterceptor[Any, Any]
        | grpc.StreamStreamClientInterceptor[Any, Any]
    )
    AioClientInterceptor: TypeAlias = (
        grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
        | grpc.aio.UnaryStreamClientInterceptor[Any, Any]
        | grpc.aio.StreamUnaryClientInterceptor[Any, Any]
        | grpc.aio.StreamStreamClientInterceptor[Any, Any]
    )

ChannelOption: TypeAlias = tuple[str, Any]

# The largest message a client sends or accepts, and a server's default receive limit.
MAX_MESSAGE_BYTES = 1024 * 1024

CHANNEL_OPTIONS: tuple[ChannelOption, ...] = (
    # Off: with a retry policy in a service config, gRPC would retry under every tenacity attempt.
    ("grpc.enable_retries", 0),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)
_FIXED_KEYS = frozenset(key for key, _ in CHANNEL_OPTIONS)

# gRPC's default reconnect back-off grows from 1 s to 120 s, so after an outage of a minute a
# channel could stay in TRANSIENT_FAILURE for a long while after the server is back, failing
# every call fast. Capped at 1 s, a channel is ready within about a second of the server's return.
RECONNECT_OPTIONS: tuple[ChannelOption, ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    # The shortest time one connection attempt may take (connect and TLS handshake), not a wait:
    # a refused connection fails at once; 5 s (default 20 s) bounds how long an attempt to a host
    # that drops packets delays the next one.
    ("grpc.min_reconnect_backoff_ms", 5_000),
    # A name that resolves to a new address (a container restarted elsewhere) is looked up again
    # after a failure no sooner than this (default 30 s).
    ("grpc.dns_min_time_between_resolutions_ms", 1_000),
)

# gRPC's default policy, pick_first, sends every call of a channel to the first address its target
# resolves to. Behind a name with several addresses (a Kubernetes headless Service: one per pod), that
# is one replica per client, and replicas added later get no calls from it. round_robin keeps a
# connection to each address and takes them in turn; for a name with one address nothing changes.
BALANCING_OPTIONS: tuple[ChannelOption, ...] = (("grpc.lb_policy_name", "round_robin"),)
_DEFAULT_OPTIONS = (*RECONNECT_OPTIONS, *BALANCING_OPTIONS)


class CleartextTokenRefused(ValueError):
    """A bearer token would travel in cleartext to a target beyond loopback (no CA file, no opt-in)."""

    def __init__(self, target: str) -> None:
        super().__init__(
            f"refusing to send a bearer token in cleartext to {target}: beyond loopback give a CA file "
            "to use TLS, or opt in to cleartext explicitly"
        )
        self.target = target


def _traced() -> bool:
    # The OpenTelemetry API is optional for a client (the "tracing" extra); without it, no spans.
    return importlib.util.find_spec("opentelemetry") is not None


def _span_interceptors() -> list[ClientInterceptor]:
    if not _traced():
        return []
    from decisionflow.client_tracing import ClientSpans

    return [ClientSpans()]


def _aio_span_interceptors() -> list[AioClientInterceptor]:
    if not _traced():
        return []
    from decisionflow.client_tracing import AioClientSpans

    return [AioClientSpans()]


def check_cleartext_token(
    target: str, *, ca_file: StrPath | None, token: str | None, allow_cleartext_token: bool = False
) -> None:
    """Raise CleartextTokenRefused when token would be sent without TLS to a target beyond loopback."""
    if token is not None and ca_file is None and not allow_cleartext_token and not is_loopback(target):
        raise CleartextTokenRefused(target)


def channel_options(extra: Sequence[ChannelOption] = ()) -> list[ChannelOption]:
    """Return the fixed options, the reconnect and balancing options extra does not set, then extra; extra
    may not override a fixed option."""
    overridden = sorted(key for key, _ in extra if key in _FIXED_KEYS)
    if overridden:
        raise ValueError(f"channel options {', '.join(overridden)} are fixed and cannot be overridden")
    given = {key for key, _ in extra}
    return [*CHANNEL_OPTIONS, *(option for option in _DEFAULT_OPTIONS if option[0] not in given), *extra]


def insecure_channel(
    target: str,
    *,
    interceptors: Sequence[ClientInterceptor] = (),
    options: Sequence[ChannelOption] = (),
) -> grpc.Channel:
    """Return a plaintext channel to target (loopback use) with the fixed options and interceptors."""
    channel = grpc.insecure_channel(grpc_target(target), options=channel_options(options))
    return grpc.intercept_channel(channel, *interceptors)


def secure_channel(
    target: str,
    credentials: grpc.ChannelCredentials,
    *,
    interceptors: Sequence[ClientInterceptor] = (),
    options: Sequence[ChannelOption] = (),
) -> grpc.Channel:
    """Return a TLS channel to target with the fixed options and interceptors."""
    channel = grpc.secure_channel(grpc_target(target), credentials, options=channel_options(options))
    return grpc.intercept_channel(channel, *interceptors)


def aio_insecure_channel(
    target: str,
    *,
    interceptors: Sequence[AioClientInterceptor] = (),
    options: Sequence[ChannelOption] = (),
) -> grpc.aio.Channel:
    """Return a plaintext asyncio channel to target with the fixed options and interceptors."""
    return grpc.aio.insecure_channel(
        grpc_target(target),
        options=channel_options(options),
        # grpc-stubs types aio interceptors as an opaque placeholder; the runtime takes these.
        interceptors=cast("Sequence[grpc.aio.ClientInterceptor]", list(interceptors)) or None,
    )


def aio_secure_channel(
    target: str,
    credentials: grpc.ChannelCredentials,
    *,
    interceptors: Sequence[AioClientInterceptor] = (),
    options: Sequence[ChannelOption] = (),
) -> grpc.aio.Channel:
    """Return a TLS asyncio channel to target with the fixed options and interceptors."""
    return grpc.aio.secure_channel(
        grpc_target(target),
        credentials,
        options=channel_options(options),
        interceptors=cast("Sequence[grpc.aio.ClientInterceptor]", list(interceptors)) or None,
    )


def open_channel(
    target: str,
    *,
    ca_file: StrPath | None = None,
    token: str | None = None,
    options: Sequence[ChannelOption] = (),
    allow_cleartext_token: bool = False,
) -> grpc.Channel:
    """Return a channel to target with the fixed options: TLS trusting ca_file when given (plaintext
    otherwise), and ``authorization: Bearer <token>`` on every call when token is given. A token
    without a CA file to a target beyond loopback raises CleartextTokenRefused unless
    allow_cleartext_token is True."""
    check_cleartext_token(target, ca_file=ca_file, token=token, allow_cleartext_token=allow_cleartext_token)
    interceptors = _span_interceptors()
    if token is not None:
        interceptors.append(SyncBearerTokenInterceptor(token))
    if ca_file is None:
        return insecure_channel(target, interceptors=interceptors, options=options)
    return secure_channel(target, channel_credentials(ca_file), interceptors=interceptors, options=options)


def open_aio_channel(
    target: str,
    *,
    ca_file: StrPath | None = None,
    token: str | None = None,
    options: Sequence[ChannelOption] = (),
    allow_cleartext_token: bool = False,
) -> grpc.aio.Channel:
    """Return an asyncio channel to target with the fixed options: TLS trusting ca_file when given
    (plaintext otherwise), and ``authorization: Bearer <token>`` on every call when token is given. A
    token without a CA file to a target beyond loopback raises CleartextTokenRefused unless
    allow_cleartext_token is True."""
    check_cleartext_token(target, ca_file=ca_file, token=token, allow_cleartext_token=allow_cleartext_token)
    interceptors = _aio_span_interceptors()
    if token is not None:
        interceptors.append(BearerTokenInterceptor(token))
    if ca_file is None:
        return aio_insecure_channel(target, interceptors=interceptors, options=options)
    return aio_secure_channel(target, channel_credentials(ca_file), interceptors=interceptors, options=options)
