"""Run the demo: prepare the state directory, play the eight steps, print the verdict, stop every child."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from sqlalchemy.engine import make_url

from decisionflow_demo import workspace as ws
from decisionflow_demo.children import Children, DemoError, child_environment
from decisionflow_demo.stack import DemoStack, Transcript
from decisionflow_demo.story import Story
from decisionflow_server.storage import db

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class DemoOptions:
    """How to run the demo; None means the default (a temporary state directory, SQLite files in it)."""

    state_dir: Path | None = None
    orchestrator_database_url: str | None = None
    receiver_database_url: str | None = None
    keep_running: bool = False
    out: TextIO | None = None  # None: sys.stdout at the time of the run
    workers: int = 1  # server processes per service (their --workers)


def redacted(url: str) -> str:
    """The database URL without its password, fit to print."""
    return make_url(db.normalise_url(url)).render_as_string(hide_password=True)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt (main thread only)."""
    # SIGTERM must stop the children too, so it unwinds like Ctrl-C; SIGINT is set explicitly because a
    # shell starting the demo in the background hands it down ignored.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def uninterruptible() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM are ignored (main thread only)."""
    # Stopping the children is bounded (SIGKILL after a timeout); a second Ctrl-C must not cut it short.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_demo(options: DemoOptions) -> int:
    """Run the demo of docs/demo.md end to end; the last line written is the JSON verdict. Return the exit status."""
    begun = time.monotonic()
    out = options.out or sys.stdout
    try:
        workspace = ws.prepare(options.state_dir, options.orchestrator_database_url, options.receiver_database_url)
    except ValueError as exc:
        raise DemoError(str(exc), exit_code=2) from exc
    transcript = Transcript(out)
    transcript.plain(
        f"decisionflow demo in {workspace.root}: orchestrator database {redacted(workspace.orchestrator_url)}, "
        f"receiver database {redacted(workspace.receiver_url)}; authentication on (tokens in tokens/)"
        + (f"; {options.workers} worker processes per service" if options.workers > 1 else "")
    )
    children = Children(workspace.logs, child_environment(), workspace.root)
    story = Story(DemoStack(workspace, children, transcript, options.workers))
    error: str | None = None
    exit_code = EXIT_OK
    with signals_interrupt():
        try:
            try:
                story.step1()
                story.step2()
                story.step3()
                story.step4()
                story.step5()
                story.step6()
                story.step7()
                story.step8()
            except DemoError as exc:
                error, exit_code = str(exc), exc.exit_code
            except KeyboardInterrupt:
                error, exit_code = "interrupted", EXIT_INTERRUPTED
            except Exception as exc:
                traceback.print_exc(file=sys.stderr)
                error, exit_code = f"{type(exc).__name__}: {exc}", EXIT_FAILED
            failed = story.seen.failed()
            if exit_code == EXIT_OK and failed:
                exit_code = EXIT_FAILED
            verdict = _verdict(story, workspace, failed, error, time.monotonic() - begun, options.workers)
            _conclude(transcript, verdict, failed, error, workspace)
            out.write(json.dumps(verdict) + "\n")
            out.flush()
            if options.keep_running and error is None:
                _wait_for_interrupt(story, workspace)
        finally:
            with uninterruptible():
                children.close()
    return exit_code


def _verdict(
    story: Story, workspace: ws.Workspace, failed: list[str], error: str | None, seconds: float, workers: int
) -> Any:
    seen = story.seen
    return {
        "ok": not failed and error is None,
        "case_id": ws.CASE_ID,
        "operation_id": seen.operation_id,
        "checkpoints": seen.checkpoints,
        "reemitted_from_checkpoint": seen.reemitted_from_checkpoint,
        "unknown_before_reconcile": seen.unknown_before_reconcile,
        "committed_after_reconcile": seen.committed_after_reconcile,
        "effects_after_reconcile": seen.effects_after_reconcile,
        "effects_for_case": seen.effects_for_case,
        "replay": seen.replay,
        "conflict_refused": seen.conflict_refused,
        "stale_refused": seen.stale_refused,
        "omitted_refused": seen.omitted_refused,
        "control_case_id": ws.CONTROL_CASE_ID,
        "control_effects": seen.control_effects,
        "audit_verified": seen.audit_verified,
        "quorum_case_id": ws.QUORUM_CASE_ID,
        "earlier_rule_kept": seen.earlier_rule_kept,
        "not_eligible_refused": seen.not_eligible_refused,
        "quorum_two_of_three": seen.quorum_two_of_three,
        "waiting_case_id": ws.WAITING_CASE_ID,
        "waiter_kept_waiting": seen.waiter_kept_waiting,
        "waiter_saw_outcome": seen.waiter_saw_outcome,
        "jetstream": seen.jetstream,
        "consumer_saw_outcome": seen.consumer_saw_outcome,
        "failed": failed,
        "error": error,
        "state_dir": str(workspace.root),
        "orchestrator_database": redacted(workspace.orchestrator_url),
        "receiver_database": redacted(workspace.receiver_url),
        "workers": workers,
        "seconds": round(seconds, 2),
    }


def _conclude(
    transcript: Transcript, verdict: dict[str, Any], failed: list[str], error: str | None, workspace: ws.Workspace
) -> None:
    if error is not None:
        transcript.plain(f"Stopped: {error} (child logs in {workspace.logs})")
    elif verdict["ok"]:
        transcript.plain(
            f"Result: one approval, one effect. {ws.CASE_ID} has exactly {verdict['effects_for_case']} effect after "
            f"a restart, a lost reply, a reconciler pass and a replay; the control wrote "
            f"{verdict['control_effects']}; the signed audit log proves who proposed, approved and settled it. "
            f"Under the rule put in force, {ws.QUORUM_CASE_ID} waited for a second lead and then had one effect. "
            f"The service waiting on {ws.WAITING_CASE_ID} heard its outcome the moment it was settled, without "
            f"polling{', and so did a JetStream consumer' if verdict['consumer_saw_outcome'] else ''}. "
            f"({verdict['seconds']:.1f} s)"
        )
    elif failed:
        transcript.plain(f"Result: NOT as expected: {', '.join(failed)} (child logs in {workspace.logs})")


def _wait_for_interrupt(story: Story, workspace: ws.Workspace) -> None:
    services = story.stack.children.services
    orchestrator = story.stack.orchestrator.target if story.stack.orchestrator else "?"
    sys.stderr.write(
        f"still running: {', '.join(f'{s.name} pid {s.pid} on {s.target}' for s in services)}. Try:\n"
        f"  decisionflow status {story.seen.operation_id} --target {orchestrator} "
        f"--token-file {workspace.token_file(ws.REVIEWER)}\n"
        "Ctrl-C stops them.\n"
    )
    sys.stderr.flush()
    with contextlib.suppress(KeyboardInterrupt):
        while services and all(service.process.poll() is None for service in services):
            time.sleep(0.5)
