"""Step 8 of docs/demo.md: the services that wait. ``ava``'s service starts T-1045 and waits for its outcome
with ``decisionflow watch --outcome`` (``ReviewClient.wait_for_outcome`` on the event feed, no polling), in a
process of its own. Under the rule step 7 put in force, the first lead's approval is a vote: the waiting
service keeps waiting. The second lead's approval commits the effect, and the waiting service prints the
outcome the moment it is settled."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

from decisionflow_demo import workspace as ws
from decisionflow_demo.children import DemoError
from decisionflow_demo.quorum import AWAITING, COMMITTED, FIRST_LEAD, SECOND_LEAD, Quorum
from decisionflow_demo.stack import DemoStack, short

# Seconds the waiting service waits at most; the step takes a few.
WAIT_SECONDS = 120


@dataclass(frozen=True)
class WaitingSeen:
    """What step 8 observed."""

    waiter_kept_waiting: bool
    """The waiting service was still waiting after the first lead's vote."""
    waiter_saw_outcome: bool
    """It printed COMMITTED, with the receipt of the effect the second lead's approval wrote, and exited 0."""


class Waiting:
    """A waiting service beside the demo's orchestrator, and the two approvals it waits for."""

    def __init__(self, stack: DemoStack) -> None:
        self.stack = stack
        self.ws = stack.ws
        self.say = stack.say
        self.quorum = Quorum(stack)

    def shows(self) -> WaitingSeen:
        """Start T-1045, wait for it in another process, approve it twice; report what the waiter printed."""
        assert self.stack.orchestrator is not None
        op = self._start()
        argv = ["watch", "--outcome", op, "--seconds", str(WAIT_SECONDS), "--target", self.stack.orchestrator.target]
        argv += ["--token-file", str(self.ws.token_file(ws.AUTHOR))]
        self.say.line(
            f"$ decisionflow watch --outcome {short(op)} --seconds {WAIT_SECONDS} &   "
            f"(as {ws.AUTHOR}: the service that started the review waits for its outcome)"
        )
        waiter = subprocess.Popen(
            [sys.executable, "-m", "decisionflow_cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=self.stack.children.env,
            cwd=self.stack.children.cwd,
            start_new_session=True,
        )
        try:
            time.sleep(1.0)  # the waiter is up and watching; an outcome before that would be read at its start
            first = self.quorum.vote(op, FIRST_LEAD)
            self.say.line(f"-> {self.quorum.said(first)}")
            kept_waiting = first.outcome == AWAITING and waiter.poll() is None
            self.say.line(f"-> the waiting service is {'still waiting' if kept_waiting else 'no longer waiting'}")
            second = self.quorum.vote(op, SECOND_LEAD)
            answered = time.monotonic()
            self.say.line(f"-> {self.quorum.said(second)}")
            out, err = waiter.communicate(timeout=WAIT_SECONDS + 10)
            heard = time.monotonic()
        except subprocess.TimeoutExpired as exc:
            raise DemoError("the waiting service did not hear the outcome") from exc
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        printed = err.strip().splitlines()[-1] if err.strip() else "(nothing)"
        self.say.line(
            f"-> the waiting service printed {printed!r} and exited {waiter.returncode}, "
            f"{(heard - answered) * 1000:.0f} ms after the second approval was answered"
        )
        try:
            document = json.loads(out)
        except ValueError:
            document = {}
        receipt = (document.get("operation") or {}).get("receipt") or {}
        return WaitingSeen(
            waiter_kept_waiting=kept_waiting,
            waiter_saw_outcome=(
                waiter.returncode == 0
                and second.outcome == COMMITTED
                and document.get("state") == COMMITTED
                and bool(receipt.get("receipt_id"))
                and self.stack.effects(ws.WAITING_CASE_ID) == 1
            ),
        )

    def _start(self) -> str:
        started = self.stack.review(
            "start", [str(self.ws.input(f"{ws.WAITING_CASE_ID}.json"))], ws.AUTHOR, f"{ws.WAITING_CASE_ID}.json"
        )
        op = str(started.document.get("operation_id", ""))
        if started.exit_code != 0 or not op:
            raise DemoError(f"decisionflow start failed (exit {started.exit_code}): {started.message}")
        self.say.line(f"-> {started.document.get('state')}, operation {short(op)}")
        return op
