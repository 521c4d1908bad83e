"""``decisionflow health``: a container healthcheck for the services (grpc.health.v1) and for the
reconciler loop's ``/healthz`` (any HTTP endpoint: 2xx is serving). Exit 0 when serving, 1 when not."""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow.channels import insecure_channel, secure_channel
from decisionflow.tls import channel_credentials
from decisionflow_cli.command import CommandError, Subparsers
from decisionflow_server.foundation import settings


def register(subparsers: Subparsers) -> None:
    """Add the ``health`` command."""
    parser = subparsers.add_parser(
        "health",
        help="check that a service answers SERVING (exit 0) or not (exit 1)",
        epilog="exit status: 0 serving, 1 not serving or unreachable, 2 bad usage",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--target", type=_target, help="host:port of a gRPC service (grpc.health.v1.Health/Check)")
    target.add_argument(
        "--http",
        help="http(s) URL that must answer 2xx, e.g. the reconciler's http://HOST:PORT/healthz (503 when its "
        "passes keep failing)",
    )
    parser.add_argument("--service", default="", help="service name to check (default: the whole server)")
    parser.add_argument("--ca-file", type=Path, help="CA bundle: check over TLS")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds each check may take (default 3)")
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="check again every 0.2 s until serving or SECONDS have passed (default 0: check once)",
    )
    parser.set_defaults(func=_health)


def _target(value: str) -> str:
    try:
        return settings.target(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _health(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise CommandError("--timeout must be positive")
    if not 0 <= args.wait <= MAX_WAIT_SECONDS:
        raise CommandError(f"--wait must be 0 to {MAX_WAIT_SECONDS} seconds")
    deadline = time.monotonic() + args.wait
    while True:
        serving, line = _check(args)
        # While waiting, only the last answer is reported: one line, as for a single check.
        if serving or time.monotonic() + WAIT_STEP_SECONDS > deadline:
            (sys.stdout if line.split(" ", 1)[0] in STATUS_WORDS else sys.stderr).write(line + "\n")
            return 0 if serving else 1
        time.sleep(WAIT_STEP_SECONDS)


MAX_WAIT_SECONDS = 3600
WAIT_STEP_SECONDS = 0.2
STATUS_WORDS = frozenset(health_pb2.HealthCheckResponse.ServingStatus.keys())


def _check(args: argparse.Namespace) -> tuple[bool, str]:
    """Check once; return whether the service is serving and the line that reports it."""
    if args.http:
        return _check_http(args.http, args.timeout)
    # The channel helpers without open_channel's CLIENT span: a probe carries no token and joins no
    # trace, and leaving the tracing API out keeps a run that Kubernetes repeats every few seconds cheap.
    if args.ca_file is None:
        channel = insecure_channel(args.target)
    else:
        channel = secure_channel(args.target, channel_credentials(args.ca_file))
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
    except grpc.RpcError as exc:
        return False, f"decisionflow health: {args.target}: {exc.code().name}"
    finally:
        channel.close()
    return answer.status == health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.ServingStatus.Name(
        answer.status
    )


def _check_http(url: str, timeout: float) -> tuple[bool, str]:
    """Check url once: healthy when it answers 2xx; a URL that is not http(s) is bad usage."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CommandError(f"--http takes an http:// or https:// URL, not {url!r}")
    # Imported here: urllib.request (with http.client and email) is not needed by the gRPC check.
    from urllib.error import HTTPError, URLError
    from urllib.request import urlopen

    try:
        with urlopen(url, timeout=timeout) as response:  # noqa: S310 - scheme checked above
            status = int(response.status)
    except HTTPError as exc:  # a non-2xx answer: the endpoint says it is not healthy
        status = exc.code
        exc.close()
    except (URLError, OSError) as exc:
        return False, f"decisionflow health: {url}: {exc}"
    healthy = 200 <= status < 300
    return healthy, "SERVING" if healthy else f"NOT_SERVING (HTTP {status})"
