"""Each rule of the reconciler against real servers: a strong receiver, one that answers from a
lagging replica (eventual NOT_FOUND), one that cannot be reached, and one that keeps keys only
for a while.

The open operations are made by real faults, in process:
- ``applied``: Approve through a receiver that commits and then loses every reply → UNKNOWN,
  effect written;
- ``missing``: Approve through an orchestrator that fails right after recording the attempt
  (``orchestrator.after_attempt``) → UNKNOWN, Apply never sent;
- ``approved``: APPROVED, never attempted. The orchestrator now records an approval and its first
  attempt in one transaction, so no fault of this version leaves it; an orchestrator before
  revision 0002 did when it crashed between the two, and such rows remain. It is seeded through
  the store as that version wrote it (the decision alone), the one seeded operation here.
The retention test also seeds one thing: it moves two first attempts back an hour in the
orchestrator's database, as if they had been made that long ago.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from decisionflow.v1 import common_pb2
from tests.support.reconciling import (
    AFTER_ATTEMPT,
    LOST_REPLY,
    age_first_attempt,
    approve_and_crash,
    approve_unknown,
    approved_never_attempted,
    closed_port,
    lagging_replica,
    lookup,
    operation,
    reconcile,
    start_receiver,
)
from tests.support.stack import Stack

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

UNKNOWN = common_pb2.OPERATION_STATE_UNKNOWN
APPROVED = common_pb2.OPERATION_STATE_APPROVED
COMMITTED = common_pb2.OPERATION_STATE_COMMITTED


@dataclass(frozen=True)
class OpenOperations:
    """A stack whose orchestrator and receiver now run without faults, and its three open operations."""

    stack: Stack
    applied: str
    missing: str
    approved: str


@pytest.fixture
def open_operations(make_stack: Callable[..., Stack]) -> OpenOperations:
    """Three open operations made by real faults, then a stack that runs without them."""
    stack = make_stack(receiver_failpoints=LOST_REPLY, receiver_timeout_seconds=1.0)
    applied = approve_unknown(stack, "T-applied")
    stack.stop_orchestrator()
    stack.start_receiver()  # replies are delivered again from here on
    stack.start_orchestrator(failpoints=AFTER_ATTEMPT)
    missing = approve_and_crash(stack, "T-missing")
    stack.stop_orchestrator()
    stack.start_orchestrator()
    approved = approved_never_attempted(stack, "T-approved")
    assert [operation(stack, op).state for op in (applied, missing, approved)] == [UNKNOWN, UNKNOWN, APPROVED]
    assert (stack.effects("T-applied"), stack.effects("T-missing"), stack.effects("T-approved")) == (1, 0, 0)
    return OpenOperations(stack, applied, missing, approved)


def test_strong_receiver_settles_the_applied_and_redrives_the_rest(open_operations: OpenOperations) -> None:
    s = open_operations
    summary = reconcile(s.stack)
    assert (summary.examined, summary.settled, summary.redriven.committed) == (3, 1, 2)
    assert (summary.still_unknown, summary.lookup_failures, summary.escalated) == (0, 0, 0)
    for op, case in ((s.applied, "T-applied"), (s.missing, "T-missing"), (s.approved, "T-approved")):
        settled = operation(s.stack, op)
        assert settled.state == COMMITTED
        assert settled.receipt.receipt_id == lookup(s.stack, op).receipt.receipt_id
        assert s.stack.effects(case) == 1
    # A second pass finds nothing open.
    assert reconcile(s.stack).examined == 0


def test_no_redrive_only_notes_a_strong_not_found(open_operations: OpenOperations) -> None:
    s = open_operations
    summary = reconcile(s.stack, no_redrive=True)
    assert (summary.settled, summary.redriven.total, summary.noted, summary.still_unknown) == (1, 0, 2, 2)
    missing = operation(s.stack, s.missing)
    assert missing.state == UNKNOWN
    assert missing.last_lookup.status == common_pb2.LOOKUP_STATUS_NOT_FOUND
    assert missing.last_lookup.consistency == common_pb2.CONSISTENCY_STRONG
    assert operation(s.stack, s.approved).state == APPROVED
    assert s.stack.effects("T-missing") == s.stack.effects("T-approved") == 0


def test_eventual_not_found_keeps_an_unknown_open(open_operations: OpenOperations, tmp_path: Path) -> None:
    s = open_operations
    replica = start_receiver(s.stack, replica_database_url=lagging_replica(tmp_path))
    summary = reconcile(s.stack, receiver_port=replica)
    # The replica has seen no effect. For the two UNKNOWN operations that proves nothing; the
    # APPROVED one was never attempted, so its re-drive cannot duplicate anything.
    assert (summary.settled, summary.noted, summary.redriven.committed, summary.still_unknown) == (0, 2, 1, 2)
    for op in (s.applied, s.missing):
        noted = operation(s.stack, op)
        assert noted.state == UNKNOWN
        assert noted.last_lookup.status == common_pb2.LOOKUP_STATUS_NOT_FOUND
        assert noted.last_lookup.consistency == common_pb2.CONSISTENCY_EVENTUAL
        assert noted.last_lookup.error == ""
    assert operation(s.stack, s.approved).state == COMMITTED
    assert (s.stack.effects("T-applied"), s.stack.effects("T-missing"), s.stack.effects("T-approved")) == (1, 0, 1)
    # Once a strong answer is available, the same operations settle and re-drive.
    after = reconcile(s.stack)
    assert (after.settled, after.redriven.committed, after.still_unknown) == (1, 1, 0)


def test_unreachable_receiver_leaves_everything_open_with_the_error_noted(open_operations: OpenOperations) -> None:
    s = open_operations
    summary = reconcile(s.stack, receiver_port=closed_port(), alert_after_seconds=0)
    assert (summary.examined, summary.lookup_failures, summary.still_unknown) == (3, 3, 3)
    assert (summary.settled, summary.redriven.total, summary.escalated) == (0, 0, 0)
    assert summary.unknown_older_than_alert == 3 and summary.alerting
    assert summary.oldest_unknown_age_seconds is not None and summary.oldest_unknown_age_seconds > 0
    for op, state in ((s.applied, UNKNOWN), (s.missing, UNKNOWN), (s.approved, APPROVED)):
        noted = operation(s.stack, op)
        assert noted.state == state
        assert noted.last_lookup.status == common_pb2.LOOKUP_STATUS_UNSPECIFIED
        assert "UNAVAILABLE" in noted.last_lookup.error
    assert (s.stack.effects("T-applied"), s.stack.effects("T-missing"), s.stack.effects("T-approved")) == (1, 0, 0)
    # Not old enough to alert on with the default threshold.
    assert not reconcile(s.stack, receiver_port=closed_port()).alerting


def test_short_retention_escalates_instead_of_redriving(open_operations: OpenOperations) -> None:
    s = open_operations
    # First attempts an hour ago, keys kept ten minutes: the receiver may have applied and forgotten.
    for op in (s.applied, s.missing):
        age_first_attempt(s.stack.orchestrator_url, op, timedelta(hours=1))
    forgetful = start_receiver(s.stack, key_retention=timedelta(minutes=10))
    summary = reconcile(s.stack, receiver_port=forgetful)
    # The applied one still settles (a receipt is proof at any age); the missing one is never
    # re-driven; the never-attempted one has no key to lose and is re-driven.
    assert (summary.settled, summary.escalated, summary.redriven.committed, summary.still_unknown) == (1, 1, 1, 1)
    escalated = operation(s.stack, s.missing)
    assert escalated.state == UNKNOWN
    assert escalated.last_lookup.error.startswith("escalated:")
    assert s.stack.effects("T-missing") == 0
    assert operation(s.stack, s.applied).state == operation(s.stack, s.approved).state == COMMITTED
    # Every later pass escalates it again and never re-drives it.
    again = reconcile(s.stack, receiver_port=forgetful)
    assert (again.escalated, again.redriven.total) == (1, 0)
    assert s.stack.effects("T-missing") == 0
