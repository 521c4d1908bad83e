"""``decisionflow health``: a container healthcheck for the services (grpc.health.v1) and for the
reconciler loop's ``/healthz`` (any HTTP endpoint: 2xx is serving). Exit 0 when serving, 1 when not."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from decisionflow import settings
from decisionflow.channels import open_channel
from decisionflow.cli.command import CommandError, Subparsers


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
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds before giving up (default 3)")
    parser.set_defaults(func=_health)


def _target(value: str) -> str:
    try:
        return settings.target(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _health(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise CommandError("--timeout must be positive")
    if args.http:
        return _check_http(args.http, args.timeout)
    channel = open_channel(args.target, ca_file=args.ca_file)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
    except grpc.RpcError as exc:
        sys.stderr.write(f"decisionflow health: {args.target}: {exc.code().name}\n")
        return 1
    finally:
        channel.close()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    sys.stdout.write(status + "\n")
    return 0 if answer.status == health_pb2.HealthCheckResponse.SERVING else 1


def _check_http(url: str, timeout: float) -> int:
    """Exit 0 when url answers 2xx, 1 for any other status or no answer; a URL that is not http(s) is bad usage."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CommandError(f"--http takes an http:// or https:// URL, not {url!r}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - scheme checked above
            status = int(response.status)
    except urllib.error.HTTPError as exc:  # a non-2xx answer: the endpoint says it is not healthy
        status = exc.code
        exc.close()
    except (urllib.error.URLError, OSError) as exc:
        sys.stderr.write(f"decisionflow health: {url}: {exc}\n")
        return 1
    healthy = 200 <= status < 300
    sys.stdout.write(("SERVING" if healthy else f"NOT_SERVING (HTTP {status})") + "\n")
    return 0 if healthy else 1
