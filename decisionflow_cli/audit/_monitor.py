"""``decisionflow audit monitor``: what a witness does. Keep the last checkpoint seen in a state file, fetch the
log's published checkpoint (its URL or its file), and accept it only if it extends the one kept.

    the new checkpoint, against the one kept      answer                                   exit
    none published yet (404, no file), no state   nothing to check yet                      0
    none published, a checkpoint kept             cannot check: the publication is gone     1
    no state file yet                             kept (trusted on first use)               0
    not signed by the key, or another origin      refused; the state is kept                4
    the same size and root                        unchanged                                 0
    the same size, another root                   a fork                                    4
    a smaller size                                a rollback: the log never shrinks         4
    a larger size, the log's consistency proof    kept                                      0
      (GetConsistencyProof) holds
    ... the proof does not hold                   a fork                                    4

A fork is proven by two checkpoints the same key signed of which neither extends the other: the
monitor keeps the new one beside its state file (``<state>.fork``) for whoever investigates, and
keeps its state, so every later run fails too until someone looks. The state file holds the signed
note exactly as fetched, so it is also what ``decisionflow audit verify --since`` and ``export
--since`` take. Only a larger checkpoint needs the orchestrator (role auditor or operator); the
fetch and the check need nothing but the verifier key.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from types import FrameType

from decisionflow.client import AuditClient, DecisionflowError
from decisionflow.transparency import (
    Checkpoint,
    NoteVerifier,
    ProofError,
    TransparencyError,
    open_checkpoint,
    parse_checkpoint,
    parse_note,
    verify_consistency,
)
from decisionflow_cli.audit._verify import read_keys
from decisionflow_cli.command import CommandError
from decisionflow_cli.review._connection import connection, read_input
from decisionflow_cli.review._output import EXIT_DONE, EXIT_ERROR, failed, say

EXIT_FORK = 4
# A checkpoint is a few lines and a signature or two; anything much larger is not one.
MAX_CHECKPOINT_BYTES = 64 * 1024
FETCH_SECONDS = 10.0


class NothingPublished(Exception):
    """The log has published no checkpoint: its URL answers 404, or its file does not exist."""


class ForkFound(Exception):
    """The new checkpoint does not extend the one kept (or is not the log's): the monitor's alarm."""


@dataclass(frozen=True, slots=True)
class Seen:
    """A checkpoint the monitor has accepted: the signed note as fetched, and what it states."""

    signed_note: str
    checkpoint: Checkpoint


def fetch(source: str) -> str:
    """The signed note at source: an http(s) URL (the log's ``/checkpoint``) or a file; NothingPublished when the
    URL answers 404 or the file does not exist, CommandError (exit 1) when it cannot be fetched."""
    if not source.startswith(("http://", "https://")):
        if source != "-" and not Path(source).exists():
            raise NothingPublished(f"{source} does not exist")
        return read_input(source, "the checkpoint")
    try:
        with urllib.request.urlopen(source, timeout=FETCH_SECONDS) as answer:  # noqa: S310 (http(s) only)
            raw: bytes = answer.read(MAX_CHECKPOINT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == HTTPStatus.NOT_FOUND:
            raise NothingPublished(f"{source} answered 404") from exc
        raise CommandError(f"cannot fetch the checkpoint {source}: {exc}", EXIT_ERROR) from exc
    except OSError as exc:  # urllib's URLError among them
        raise CommandError(f"cannot fetch the checkpoint {source}: {exc}", EXIT_ERROR) from exc
    if len(raw) > MAX_CHECKPOINT_BYTES:
        raise CommandError(f"{source} answered more than {MAX_CHECKPOINT_BYTES} bytes: not a checkpoint", EXIT_FORK)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"{source} answered a checkpoint that is not UTF-8 (byte {exc.start})", EXIT_FORK) from exc


def opened(signed_note: str, keys: list[NoteVerifier], origin: str | None, what: str) -> Seen:
    """The checkpoint one of keys signed (of origin, when given); ForkFound naming what when it is not one."""
    try:
        return Seen(signed_note, open_checkpoint(signed_note, keys, origin=origin))
    except TransparencyError as error:
        raise ForkFound(f"{what} does not hold: {error}") from error


def kept(state: Path) -> Seen:
    """The checkpoint kept in the state file. It was checked when it was kept; its key may since have been
    rotated away, so only its text is read now."""
    signed_note = read_input(str(state), "the state file")
    try:
        return Seen(signed_note, parse_checkpoint(parse_note(signed_note).text))
    except TransparencyError as error:
        raise CommandError(f"the state file {state} holds no checkpoint: {error}") from error


class Monitor:
    """Checks a new checkpoint against the one kept; proofs come from the orchestrator only when needed."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args

    def check(self, old: Seen, new: Seen) -> str:
        """What the new checkpoint is to the old one, in words; ForkFound when it does not extend it."""
        was, now = old.checkpoint, new.checkpoint
        if now.origin != was.origin:
            raise ForkFound(f"the checkpoint is of the log {now.origin!r}, the one kept of {was.origin!r}")
        if now.size < was.size:
            raise ForkFound(f"the log's checkpoint went back from size {was.size} to {now.size}; a log only grows")
        if now.size == was.size:
            if now.root_hash != was.root_hash:
                raise ForkFound(f"two checkpoints of size {now.size} with different roots: the log has forked")
            return f"unchanged: checkpoint {now.size}"
        proof = self._proof(was.size, now.size)
        try:
            verify_consistency(was.size, now.size, proof, was.root_hash, now.root_hash)
        except ProofError as error:
            raise ForkFound(
                f"checkpoint {now.size} does not extend checkpoint {was.size} ({error}): the log has forked"
            ) from error
        return f"consistent: checkpoint {now.size} extends checkpoint {was.size}"

    def _proof(self, old_size: int, new_size: int) -> tuple[bytes, ...]:
        with connection(self._args) as open_connection:
            audit = AuditClient(open_connection.channel, timeout=open_connection.timeout, policy=open_connection.policy)
            try:
                return audit.consistency_proof(old_size, new_size).hashes
            except DecisionflowError as error:
                raise failed("audit monitor", error, "the audit log", print_json=False) from error


def _write(path: Path, text: str) -> None:
    """Write text to path whole or not at all."""
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=".monitor-", dir=path.parent)
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as file:
            file.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}", EXIT_ERROR) from exc


def run_monitor(args: argparse.Namespace) -> int:
    """Exit 0 when the published checkpoint extends the one kept (and keep it), 4 on a fork. With --every,
    check again every that many seconds until a fork, a refusal or bad input ends it (a checkpoint that
    cannot be fetched, or an orchestrator unavailable, is said and tried again at the next round), or until
    SIGTERM or SIGINT stops it between two checks (exit 0: a container stopped is not a failure)."""
    keys = read_keys(args.public_key)
    with _until_stopped() as stop:
        while True:
            try:
                exit_code = _check_once(args, keys)
            except CommandError as error:
                if args.every is None or error.exit_code != EXIT_ERROR:
                    raise
                say(f"audit monitor: {error.reason}; trying again in {args.every:g} s")
                exit_code = EXIT_DONE
            if args.every is None or exit_code != EXIT_DONE:
                return exit_code
            if stop.wait(args.every):
                say("audit monitor: stopped")
                return EXIT_DONE


@contextmanager
def _until_stopped() -> Iterator[threading.Event]:
    """An event SIGTERM and SIGINT set while the monitor runs (their handlers restored after)."""
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {number: signal.signal(number, request_stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _check_once(args: argparse.Namespace, keys: list[NoteVerifier]) -> int:
    state = Path(args.state)
    old = kept(state) if state.exists() else None
    try:
        signed_note = fetch(args.checkpoint)
    except NothingPublished as nothing:
        if old is not None:  # a log never unpublishes: its publication was emptied, or it is another log
            raise CommandError(
                f"no checkpoint is published ({nothing}), but checkpoint {old.checkpoint.size} of "
                f"{old.checkpoint.origin} was seen before and is kept in {state}",
                EXIT_ERROR,
            ) from nothing
        say(f"no checkpoint is published yet ({nothing}): the log has no event; nothing to check")
        return EXIT_DONE
    try:
        new = opened(signed_note, keys, args.origin, f"the checkpoint {args.checkpoint}")
        if old is None:
            _write(state, signed_note)
            say(f"kept checkpoint {new.checkpoint.size} of {new.checkpoint.origin} in {state}: the first one seen")
            return EXIT_DONE
        said = Monitor(args).check(old, new)
    except ForkFound as fork:
        evidence = state.with_name(state.name + ".fork")
        try:
            _write(evidence, signed_note)
            kept_in = f"the checkpoint fetched is kept in {evidence}"
        except CommandError as unwritten:  # the alarm matters more than the evidence file
            kept_in = f"the checkpoint fetched could not be kept: {unwritten}"
        print(f"FORK: {fork}; {kept_in}", file=sys.stderr)
        return EXIT_FORK
    if new.checkpoint.size > old.checkpoint.size:
        _write(state, signed_note)
    say(f"{said} of {new.checkpoint.origin}; kept in {state}")
    return EXIT_DONE
