"""The client examples against real services: a receiver and an orchestrator as processes, the
orchestrator set to lose its first Approve reply after the effect committed (so the caller sees an
indeterminate failure and must retry with the same operation id), and the transcript checks every
example's run must pass, whatever its language."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from decisionflow_demo.launch import ProcessStack
from decisionflow_server.foundation.processes import ServiceProcess
from tests.support.stack import CHECKPOINT_KEY, count

# The first Approve commits the effect, then fails before its reply is sent (an UNKNOWN status).
LOSE_FIRST_APPROVE_REPLY = "orchestrator.after_receiver_ok=raise@1"
EXAMPLE_CASE = "T-2001"
OPERATION_ID = r"op-v1-[0-9a-f]{64}"


@dataclass
class ExampleServices:
    """A receiver and an orchestrator as processes for one example run."""

    stack: ProcessStack
    orchestrator: ServiceProcess

    @property
    def target(self) -> str:
        """The orchestrator's address."""
        return self.orchestrator.target

    def effects(self, case_id: str = EXAMPLE_CASE) -> int:
        """Effects the receiver holds for case_id."""
        return count(self.stack.receiver_url, f"SELECT count(*) FROM effects WHERE case_id = '{case_id}'")


@pytest.fixture
def example_services(tmp_path: Path) -> Iterator[ExampleServices]:
    """A fresh receiver and orchestrator (SQLite, loopback, no credentials) that lose the first Approve reply."""
    stack = ProcessStack(
        tmp_path, f"sqlite:///{tmp_path / 'receiver.db'}", f"sqlite:///{tmp_path / 'orchestrator.db'}", CHECKPOINT_KEY
    )
    try:
        stack.start_receiver()
        orchestrator = stack.start_orchestrator(failpoints=LOSE_FIRST_APPROVE_REPLY)
        yield ExampleServices(stack, orchestrator)
    finally:
        stack.close()


def check_story(transcript: str, services: ExampleServices) -> None:
    """Assert the transcript tells the example's story and the receiver holds one effect per approval."""
    ids = re.findall(OPERATION_ID, transcript)
    assert ids, transcript
    first = ids[0]
    assert re.search(rf"^started {first}$", transcript, re.MULTILINE), transcript
    assert re.search(r"^  attempt 1 indeterminate: .*UNKNOWN", transcript, re.MULTILINE), transcript
    approved = re.search(rf"^approved {first}: outcome COMMITTED, replay true, attempts 2$", transcript, re.I | re.M)
    assert approved, transcript
    edited = re.search(rf"^started ({OPERATION_ID}), edited to ({OPERATION_ID})$", transcript, re.MULTILINE)
    assert edited, transcript
    shown, current = edited.groups()
    assert len({first, shown, current}) == 3
    assert re.search(rf"^stale: STALE_PROPOSAL definite true, current {current}$", transcript, re.I | re.M), transcript
    assert re.search(rf"^approved {current}: outcome COMMITTED, attempts 1$", transcript, re.MULTILINE), transcript
    # The lost reply was retried, never re-applied: one effect for each of the two approvals.
    assert services.effects() == 2
