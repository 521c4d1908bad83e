"""Where the review commands connect: target, bearer token and time budget, from flags or the environment."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from decisionflow.channels import CleartextTokenRefused, open_channel
from decisionflow.client import ReviewClient
from decisionflow.retry import CLIENT_DEFAULT, RetryPolicy
from decisionflow_cli.command import CommandError
from decisionflow_server.foundation import settings
from decisionflow_server.foundation.settings import Setting, SettingError, parse_settings

TARGET = settings.orchestrator_target_setting("target")
TOKEN_FILE = Setting(
    "token_file", "DECISIONFLOW_TOKEN_FILE", "file holding the bearer token to present", parse=settings.token_file
)
TIMEOUT = Setting(
    "timeout",
    "DECISIONFLOW_TIMEOUT",
    "seconds the command may take, retries included",
    "10",
    parse=settings.positive_seconds,
)
CA_FILE, INSECURE_CLEARTEXT_TOKEN = settings.orchestrator_tls_settings()
CONNECTION_SETTINGS: tuple[Setting[Any], ...] = (TARGET, TOKEN_FILE, TIMEOUT, CA_FILE, INSECURE_CLEARTEXT_TOKEN)
_RETIRED = ("DECISIONFLOW_CA_FILE", "DECISIONFLOW_INSECURE_CLEARTEXT_TOKEN")


def read_input(path: str, what: str = "input") -> str:
    """Return the UTF-8 text of path (- for standard input); raise CommandError (exit 2) if unreadable."""
    name = "standard input" if path == "-" else repr(path)
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {what} {name}: {exc.strerror or exc}") from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"{what} {name} is not UTF-8 (byte {exc.start})") from exc


@dataclasses.dataclass(frozen=True, slots=True)
class Connection:
    """An open channel to the orchestrator and the time budget every client on it keeps to."""

    channel: grpc.Channel
    timeout: float
    policy: RetryPolicy


@contextmanager
def connection(
    args: argparse.Namespace, declared: Sequence[Setting[Any]] = CONNECTION_SETTINGS
) -> Iterator[Connection]:
    """Yield a channel for the command's connection settings; it is closed afterwards. declared: the
    orchestrator's by default, or another service's declarations of the same keys (target, token file,
    timeout, CA file, cleartext opt-in) with its own variables and help."""
    try:
        settings.refuse_retired_tls_variables(os.environ, _RETIRED)
        values = parse_settings(args, declared, os.environ)
    except SettingError as error:
        raise CommandError(str(error)) from None
    timeout = values.required(TIMEOUT)
    # The whole command, retries included, ends within --timeout, and --timeout alone bounds the retries:
    # no count of attempts ends them sooner (a database failing over for 20 s is outlasted by --timeout 30).
    policy = dataclasses.replace(CLIENT_DEFAULT, name="cli", max_attempts=None, max_total_seconds=timeout)
    try:
        channel = open_channel(
            values.required(TARGET),
            ca_file=values[CA_FILE],
            token=values[TOKEN_FILE],
            allow_cleartext_token=values.required(INSECURE_CLEARTEXT_TOKEN),
        )
    except CleartextTokenRefused as refused:
        # Named as declared: the receiver's commands read the receiver's variables under the same flags.
        ca_file = next(setting for setting in declared if setting.key == CA_FILE.key)
        raise CommandError(f"{refused} ({ca_file.names}, or {INSECURE_CLEARTEXT_TOKEN.flag}=true)") from None
    try:
        yield Connection(channel, timeout, policy)
    finally:
        channel.close()


@contextmanager
def review_client(args: argparse.Namespace) -> Iterator[ReviewClient]:
    """Yield a ReviewClient for the command's settings; its channel is closed afterwards."""
    with connection(args) as open_connection:
        yield ReviewClient(open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy)
