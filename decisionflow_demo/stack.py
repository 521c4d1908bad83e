"""The demo's running parts: the receiver and orchestrator processes, the review commands run against
them, the reads that count effects and checkpoints, and the transcript they are reported in."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Sequence
from typing import Any, TextIO

import grpc
import sqlalchemy as sa

from decisionflow.channels import insecure_channel
from decisionflow.client import ReceiverClient, ReviewClient
from decisionflow_demo import workspace as ws
from decisionflow_demo.children import Children, DemoError, Finished, Service
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_server.foundation.processes import free_port
from decisionflow_server.runtime.auth import bearer_metadata
from decisionflow_server.storage import db


def short(operation_id: str) -> str:
    """An operation id cut to what a reader can follow (prefix and 12 hex digits)."""
    return operation_id[:18] + "…" if len(operation_id) > 18 else operation_id


class Transcript:
    """Numbered steps and indented lines, written as they happen."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def step(self, number: int, title: str) -> None:
        """Start step number."""
        self._write(f"{number}. {title}")

    def line(self, text: str) -> None:
        """Report one observation of the current step."""
        self._write(f"   {text}")

    def plain(self, text: str) -> None:
        """Write an unindented line."""
        self._write(text)

    def _write(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()


class DemoStack:
    """The demo's services and the clients that talk to them: launch, restart, run commands, count."""

    def __init__(self, workspace: ws.Workspace, children: Children, transcript: Transcript, workers: int = 1) -> None:
        self.ws = workspace
        # Each service's --workers: that many processes serve its port, the parent's pid stands for them.
        self._per_server = ["--workers", str(workers)] if workers > 1 else []
        self.workers = workers
        self.children = children
        self.say = transcript
        self.receiver: Service | None = None
        # Fixed for the whole run, so an orchestrator keeps dialling the receiver across its restarts.
        self.receiver_port = free_port()
        self.receiver_faults = ""
        self.orchestrator: Service | None = None

    # Services.

    def launch_receiver(self, failpoints: str = "") -> Service:
        """Stop the running receiver, if any, and launch one on the same port with failpoints."""
        if self.receiver is not None:
            old = self.receiver
            status = self.children.stop(old)
            self.say.line(f"receiver pid {old.pid} stopped (SIGTERM, exit {status})")
        args = receiver_args(
            self.ws.receiver_url,
            address=f"127.0.0.1:{self.receiver_port}",
            failpoints=failpoints,
            extra=["--credentials-file", str(self.ws.credentials), "--shutdown-grace-seconds", "2", *self._per_server],
        )
        self.receiver = self.children.launch("receiver", RECEIVER_MODULE, args)
        self.receiver_faults = failpoints
        return self.receiver

    def launch_orchestrator(self, name: str) -> Service:
        """Launch an orchestrator process called name, dialling the receiver's port with its own token."""
        keys = self.ws.checkpoint_keys.read_text(encoding="utf-8").strip()
        args = orchestrator_args(
            self.ws.orchestrator_url,
            f"127.0.0.1:{self.receiver_port}",
            extra=[
                "--receiver-token-file",
                str(self.ws.token_file(ws.ORCHESTRATOR)),
                "--credentials-file",
                str(self.ws.credentials),
                "--review-rules-file",
                str(self.ws.review_rules),
                "--shutdown-grace-seconds",
                "2",
                *self._per_server,
            ],
        )
        # The key travels in the environment, not on the command line where ps shows it.
        self.orchestrator = self.children.launch(name, ORCHESTRATOR_MODULE, args, env={CHECKPOINT_KEYS_ENV: keys})
        return self.orchestrator

    def reload_rules(self, timeout: float = 15.0) -> str:
        """SIGHUP the orchestrator and return its log message once every worker has reloaded the review rules;
        raise DemoError if one refuses the file or none says so in time."""
        assert self.orchestrator is not None
        before = len(self._rules_reloads())
        self.orchestrator.process.send_signal(signal.SIGHUP)  # the parent of workers forwards it to each
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reloads = self._rules_reloads()[before:]
            refused = [message for message in reloads if "not reloaded" in message]
            if refused:
                raise DemoError(f"{self.orchestrator.name} kept its review rules: {refused[0]}")
            if len(reloads) >= self.workers:
                return reloads[0]
            time.sleep(0.1)
        raise DemoError(f"{self.orchestrator.name} did not reload its review rules within {timeout:.0f} s")

    def _rules_reloads(self) -> list[str]:
        assert self.orchestrator is not None
        messages = []
        for line in self.orchestrator.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line the service did not write as JSON
            message = str(entry.get("message", "")) if isinstance(entry, dict) else ""
            if message.startswith(("review rules reloaded", "review rules not reloaded")):
                messages.append(message)
        return messages

    def ready(self, *services: Service) -> None:
        """Wait until the launched services serve, then say where they are."""
        self.children.wait_ready(*services)
        for service in services:
            detail = ""
            if service is self.receiver:
                detail = f" ({'fault switch ' + self.receiver_faults if self.receiver_faults else 'no fault'})"
            self.say.line(f"{service.name} pid {service.pid} on {service.target}{detail}")

    # Clients.

    def review(self, command: str, args: Sequence[str], principal: str, shown: str = "", note: str = "") -> Finished:
        """Run ``decisionflow command args`` as principal against the current orchestrator."""
        assert self.orchestrator is not None
        argv = [command, *args, "--target", self.orchestrator.target, "--token-file"]
        argv.append(str(self.ws.token_file(principal)))
        self.say.line(f"$ decisionflow {command} {shown or ' '.join(args)}   (as {principal}{note})")
        return self.children.run("decisionflow_cli", argv)

    def effects(self, case_id: str) -> int:
        """Effects the receiver holds for case_id (ListEffects with the operator's token)."""
        assert self.receiver is not None
        channel = insecure_channel(self.receiver.target)
        try:
            receiver = ReceiverClient(channel, metadata=bearer_metadata(self.ws.token(ws.OPERATOR)))
            return sum(1 for _ in receiver.list_effects(case_id))
        finally:
            channel.close()

    def review_client(self, channel: grpc.Channel, principal: str) -> ReviewClient:
        """A ReviewClient on channel presenting principal's token."""
        return ReviewClient(channel, metadata=bearer_metadata(self.ws.token(principal)))

    def count(self, sql: str, **params: Any) -> int:
        """Run one count query on the orchestrator's database (a fresh engine each time)."""
        engine = db.create_engine(self.ws.orchestrator_url, pool_size=1)
        try:
            with engine.connect() as connection:
                return int(connection.execute(sa.text(sql), params).scalar_one())
        finally:
            engine.dispose()

    def check_fresh(self) -> None:
        """Refuse databases that already hold the demo's cases: the story would be misreported."""
        cases = (ws.CASE_ID, ws.STALE_CASE_ID, ws.CONTROL_CASE_ID, ws.QUORUM_CASE_ID, ws.WAITING_CASE_ID)
        held = [case for case in cases if self.effects(case)]
        held += [case for case in cases if self.count("SELECT count(*) FROM proposals WHERE case_id = :c", c=case)]
        if held:
            raise DemoError(
                f"the databases already hold case {held[0]} from an earlier run; give fresh databases", exit_code=2
            )
