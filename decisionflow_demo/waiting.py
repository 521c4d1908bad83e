"""Step 8 of docs/demo.md: the services that wait. ``ava``'s service starts T-1045 and waits for its outcome
with ``decisionflow watch --outcome`` (``ReviewClient.wait_for_outcome`` on the event feed, no polling), in a
process of its own. Beside it, ``decisionflow-relay`` (watching as the auditor) relays the event feed into a
NATS JetStream stream on a ``nats-server`` the demo starts, and a JetStream consumer waits for T-1045's effect
event. Under the rule step 7 put in force, the first lead's approval is a vote: both keep waiting. The second
lead's approval commits the effect, and each prints the outcome the moment it is settled.

Without a ``nats-server`` binary (Debian package nats-server) the relay and its consumer are left out, and
the transcript says so; the waiting service runs all the same."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from decisionflow_demo import workspace as ws
from decisionflow_demo.children import DemoError
from decisionflow_demo.quorum import AWAITING, COMMITTED, FIRST_LEAD, SECOND_LEAD, Quorum
from decisionflow_demo.stack import DemoStack, short
from decisionflow_server.foundation.processes import ServiceProcess as Service
from decisionflow_server.foundation.processes import free_port, log_tail

# Seconds the waiting service and the consumer wait at most; the step takes a few.
WAIT_SECONDS = 120
RELAY_MODULE = "decisionflow_relay.main"
CONSUMER_MODULE = "decisionflow_demo.jetstream_consumer"


def nats_server_binary() -> str | None:
    """The nats-server to start, None when it is not installed."""
    found = shutil.which("nats-server") or "/usr/sbin/nats-server"
    return found if Path(found).is_file() else None


@dataclass(frozen=True)
class WaitingSeen:
    """What step 8 observed."""

    waiter_kept_waiting: bool
    """The waiting service was still waiting after the first lead's vote."""
    waiter_saw_outcome: bool
    """It printed COMMITTED, with the receipt of the effect the second lead's approval wrote, and exited 0."""
    jetstream: str
    """``ran``, or why the relay and its consumer were left out."""
    consumer_saw_outcome: bool
    """The JetStream consumer received T-1045's effect event, with its Nats-Msg-Id and leaf, and exited 0."""


class _Broker:
    """A nats-server with JetStream on a free loopback port, its store and log in the state directory."""

    def __init__(self, binary: str, root: Path, logs: Path) -> None:
        self.port = free_port()
        store = root / "nats"
        store.mkdir(exist_ok=True)
        self._log = (logs / "nats-server.log").open("ab")
        self.process = subprocess.Popen(
            [binary, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DemoError(f"nats-server exited {self.process.returncode} (logs/nats-server.log)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise DemoError(f"nats-server did not listen on port {self.port} within {timeout:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


class Waiting:
    """A waiting service and a JetStream consumer beside the demo's orchestrator, and the two approvals."""

    def __init__(self, stack: DemoStack) -> None:
        self.stack = stack
        self.ws = stack.ws
        self.say = stack.say
        self.quorum = Quorum(stack)

    def _python(self, module: str, args: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=dict(self.stack.children.env),
            cwd=self.stack.children.cwd,
            start_new_session=True,
        )

    def shows(self) -> WaitingSeen:
        """Start T-1045, wait for it in two other processes, approve it twice; report what each printed."""
        assert self.stack.orchestrator is not None
        target = self.stack.orchestrator.target
        broker = relay = consumer = None
        binary = nats_server_binary()
        jetstream = "ran" if binary else "nats-server is not installed (Debian package nats-server)"
        waiter = None
        try:
            if binary is not None:
                broker, relay = self._jetstream(binary, target)
            else:
                self.say.line(f"JetStream left out: {jetstream}")
            op = self._start()
            if broker is not None:
                consumer = self._python(CONSUMER_MODULE, ["--servers", broker.url, "--operation-id", op])
                self.say.line(
                    f"$ python -m {CONSUMER_MODULE} --operation-id {short(op)} &   "
                    "(a JetStream consumer, explicit acks, waits for its effect event)"
                )
            argv = ["watch", "--outcome", op, "--seconds", str(WAIT_SECONDS), "--target", target]
            argv += ["--token-file", str(self.ws.token_file(ws.AUTHOR))]
            waiter = self._python("decisionflow_cli", argv)
            self.say.line(
                f"$ decisionflow watch --outcome {short(op)} --seconds {WAIT_SECONDS} &   "
                f"(as {ws.AUTHOR}: the service that started the review waits for its outcome)"
            )
            time.sleep(1.5)  # both are up and watching; an outcome before that would be read at their start
            if relay is not None and relay.process.poll() is not None:
                raise DemoError(f"decisionflow-relay exited {relay.process.returncode}: {log_tail(relay.log_path, 3)}")
            first = self.quorum.vote(op, FIRST_LEAD)
            self.say.line(f"-> {self.quorum.said(first)}")
            waiting = [process for process in (waiter, consumer) if process is not None and process.poll() is None]
            kept_waiting = first.outcome == AWAITING and waiter.poll() is None
            self.say.line(f"-> still waiting: {len(waiting)} of {1 if consumer is None else 2}")
            second = self.quorum.vote(op, SECOND_LEAD)
            answered = time.monotonic()
            self.say.line(f"-> {self.quorum.said(second)}")
            waited = self._heard(waiter, answered, "the waiting service")
            consumed = None if consumer is None else self._heard(consumer, answered, "the JetStream consumer")
        except subprocess.TimeoutExpired as exc:
            raise DemoError("a waiting process did not hear the outcome") from exc
        finally:
            for process in (waiter, consumer):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
            if relay is not None:
                self.stack.children.stop(relay)
            if broker is not None:
                broker.stop()
        document = _json(waited[1])
        operation = _json(json.dumps(document.get("operation")))
        receipt = _json(json.dumps(operation.get("receipt")))
        effects = self.stack.effects(ws.WAITING_CASE_ID)
        return WaitingSeen(
            waiter_kept_waiting=kept_waiting,
            waiter_saw_outcome=(
                waited[0] == 0
                and second.outcome == COMMITTED
                and document.get("state") == COMMITTED
                and bool(receipt.get("receipt_id"))
                and effects == 1
            ),
            jetstream=jetstream,
            consumer_saw_outcome=consumed is not None and _consumed(consumed, op) and effects == 1,
        )

    def _jetstream(self, binary: str, target: str) -> tuple[_Broker, Service]:
        """Start nats-server and the relay into it (as the auditor)."""
        broker = _Broker(binary, self.ws.root, self.ws.logs)
        broker.wait_ready()
        self.say.line(f"nats-server pid {broker.process.pid} on 127.0.0.1:{broker.port} (JetStream on)")
        args = ["--orchestrator-target", target, "--token-file", str(self.ws.token_file(ws.AUDITOR))]
        args += ["--cursor-file", str(self.ws.root / "relay.cursor"), "--nats-url", broker.url]
        relay = self.stack.children.launch("relay", RELAY_MODULE, args, announces_port=False)
        self.say.line(
            f"decisionflow-relay pid {relay.pid} (as {ws.AUDITOR}): the event feed into stream DECISIONFLOW_EVENTS, "
            "its cursor in relay.cursor"
        )
        return broker, relay

    def _heard(self, process: subprocess.Popen[str], answered: float, who: str) -> tuple[int, str]:
        out, err = process.communicate(timeout=WAIT_SECONDS + 10)
        heard = time.monotonic()
        if who == "the waiting service":
            printed = err.strip().splitlines()[-1] if err.strip() else "(nothing)"
        else:
            event = _json(json.dumps(_json(out).get("cloudevent")))
            data = _json(json.dumps(event.get("data")))
            printed = (
                f"{event.get('type')} of {short(str(event.get('subject', '')))}, state {data.get('state')}, "
                f"Nats-Msg-Id {_json(out).get('nats_msg_id')}"
                if event
                else (err.strip() or "(nothing)")
            )
        self.say.line(
            f"-> {who} printed {printed!r} and exited {process.returncode}, "
            f"{(heard - answered) * 1000:.0f} ms after the second approval was answered"
        )
        return process.returncode, out

    def _start(self) -> str:
        started = self.stack.review(
            "start", [str(self.ws.input(f"{ws.WAITING_CASE_ID}.json"))], ws.AUTHOR, f"{ws.WAITING_CASE_ID}.json"
        )
        op = str(started.document.get("operation_id", ""))
        if started.exit_code != 0 or not op:
            raise DemoError(f"decisionflow start failed (exit {started.exit_code}): {started.message}")
        self.say.line(f"-> {started.document.get('state')}, operation {short(op)}")
        return op


def _json(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _consumed(answer: tuple[int, str], operation_id: str) -> bool:
    code, out = answer
    event = _json(out).get("cloudevent")
    if code != 0 or not isinstance(event, dict):
        return False
    data = event.get("data")
    return (
        event.get("subject") == operation_id
        and str(event.get("type", "")).endswith(".effect")
        and isinstance(data, dict)
        and data.get("state") == COMMITTED
        and bool(data.get("leaf"))
    )
