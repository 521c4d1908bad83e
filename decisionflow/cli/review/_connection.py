"""Where the review commands connect: target, bearer token and time budget, from flags or the environment."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from decisionflow.auth import bearer_metadata
from decisionflow.channels import insecure_channel, secure_channel
from decisionflow.cli.command import CommandError
from decisionflow.client import ReviewClient
from decisionflow.retry import CLIENT_DEFAULT
from decisionflow.settings import Setting, resolve
from decisionflow.tls import channel_credentials

CONNECTION_SETTINGS: tuple[Setting, ...] = (
    Setting("target", "DECISIONFLOW_ORCHESTRATOR_TARGET", "host:port of the orchestrator", "127.0.0.1:50051"),
    Setting("token_file", "DECISIONFLOW_TOKEN_FILE", "file holding the bearer token to present"),
    Setting("timeout", "DECISIONFLOW_TIMEOUT", "seconds the command may take, retries included", "10"),
    Setting("ca_file", "DECISIONFLOW_CA_FILE", "CA bundle (PEM) of the orchestrator's certificate: connect over TLS"),
)


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


@contextmanager
def review_client(args: argparse.Namespace) -> Iterator[ReviewClient]:
    """Yield a ReviewClient for the command's settings; its channel is closed afterwards."""
    values = resolve(args, CONNECTION_SETTINGS, os.environ)
    target = values["target"] or ""
    if not target:
        raise CommandError("--target must not be empty")
    try:
        timeout = float(values["timeout"] or "")
    except ValueError:
        raise CommandError(f"--timeout must be a number of seconds, not {values['timeout']!r}") from None
    if not 0 < timeout < float("inf"):
        raise CommandError(f"--timeout must be positive, not {values['timeout']!r}")
    metadata: tuple[tuple[str, str], ...] = ()
    if values["token_file"]:
        token = read_input(values["token_file"], "token file").strip()
        try:
            metadata = bearer_metadata(token)
        except ValueError as exc:
            raise CommandError(f"token file {values['token_file']!r}: {exc}") from None
    # The whole command, retries included, ends within --timeout.
    policy = dataclasses.replace(CLIENT_DEFAULT, name="cli", max_total_seconds=timeout)
    ca_file = values["ca_file"]
    if ca_file and not Path(ca_file).is_file():
        raise CommandError(f"--ca-file {ca_file!r} is not a readable file")
    channel = secure_channel(target, channel_credentials(Path(ca_file))) if ca_file else insecure_channel(target)
    try:
        yield ReviewClient(channel, timeout=timeout, policy=policy, metadata=metadata)
    finally:
        channel.close()
