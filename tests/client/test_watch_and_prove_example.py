"""examples/watch_and_prove.py against a real orchestrator that signs its log every 0.3 s: each event it
prints was proven against a checkpoint opened with the log's verifier key; a feed that lies is refused."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from decisionflow.client import AuditClient, EventsClient, EventView
from decisionflow.client.errors import BeyondCheckpoint
from decisionflow.client.event_proofs import verify_event
from decisionflow.transparency import HistoryError, open_checkpoint
from tests.support.audit import SIGNER
from tests.support.stack import Stack, approve, start_request

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "watch_and_prove.py"
COUNT = ("--count", "3")


@pytest.mark.slow
def test_the_example_proves_every_event_before_it_acts(make_stack: Callable[..., Stack], tmp_path: Path) -> None:
    stack = make_stack(audit_signer=SIGNER, audit_interval_seconds=0.3)
    review = stack.review()
    operation_id = review.StartReview(start_request("T-1"), timeout=15).proposal.operation_id
    review.Approve(approve(operation_id), timeout=15)
    public_key = tmp_path / "log.pub"
    public_key.write_text(SIGNER.key.verifier().vkey + "\n")

    done = subprocess.run(
        [sys.executable, str(EXAMPLE), f"127.0.0.1:{stack.orchestrator_port}", "--public-key", str(public_key), *COUNT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["proven", "#0", "proposal", operation_id],
        ["proven", "#1", "decision", operation_id],
        ["proven", "#2", "effect", operation_id],
    ]
    assert all(int(line.split()[-1]) >= 3 for line in lines)


def test_an_event_that_says_other_than_its_leaf_is_not_proven(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(audit_signer=SIGNER, audit_interval_seconds=0.3)
    review = stack.review()
    operation_id = review.StartReview(start_request("T-1"), timeout=15).proposal.operation_id
    review.Approve(approve(operation_id), timeout=15)
    channel = stack._channel(stack.orchestrator_port)
    stream = EventsClient(channel).watch(start_index=1)
    decision = next(stream)
    stream.close()
    assert isinstance(decision, EventView)
    audit = AuditClient(channel)
    proofs = None
    while proofs is None or proofs.checkpoint is None:
        try:
            proofs = audit.inclusion_proofs(leaf_index=1)
        except BeyondCheckpoint:
            time.sleep(0.1)
    checkpoint = open_checkpoint(proofs.checkpoint.signed_note, [SIGNER.key.verifier()])
    assert verify_event(decision, proofs, checkpoint).operation_id == operation_id
    # The same proof does not vouch for an event that claims another kind, or other bytes.
    with pytest.raises(HistoryError):
        verify_event(replace(decision, kind="effect"), proofs, checkpoint)
    with pytest.raises(HistoryError):
        verify_event(replace(decision, leaf=decision.leaf.replace(b"APPROVE", b"DECLINE")), proofs, checkpoint)
