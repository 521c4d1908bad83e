"""Key retention: pruning effects older than the retention (store on SQLite and PostgreSQL, the
prune-keys command, the server's periodic job), and what the reconciler does about a pruned key."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from decisionflow.v1 import common_pb2, effect_receiver_pb2
from decisionflow.vocabulary import OperationId, Receipt
from decisionflow_server.foundation.processes import child_environment
from decisionflow_server.storage import db
from effect_receiver.domain import Effect, check_effect
from effect_receiver.housekeeping import prune_keys
from effect_receiver.store import EffectStore, migrate
from tests.support.receiver import CASE_ID, effect_request, new_operation_id, payload_for
from tests.support.reconciling import LOST_REPLY, approve_unknown, lookup, reconcile
from tests.support.stack import Stack

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(database_url: str) -> Iterator[EffectStore]:
    engine = db.create_engine(database_url)
    migrate(engine)
    try:
        yield EffectStore(engine)
    finally:
        engine.dispose()


def _effect(operation_id: str) -> Effect:
    checked = check_effect(effect_request(operation_id, CASE_ID, payload_for(operation_id)))
    assert isinstance(checked, Effect), checked
    return checked


def _apply_at(store: EffectStore, applied_at: datetime) -> OperationId:
    operation_id = new_operation_id()
    store.apply(_effect(operation_id), Receipt(f"rcpt-{operation_id[-32:]}", operation_id, applied_at))
    return operation_id


def _records(store: EffectStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM support_review_records")).scalar_one())


def test_a_prune_deletes_only_effects_applied_before_the_cutoff_with_their_records(store: EffectStore) -> None:
    old = [_apply_at(store, T0 + timedelta(seconds=n)) for n in range(3)]
    kept = _apply_at(store, T0 + timedelta(seconds=10))
    cutoff = T0 + timedelta(seconds=5)
    assert store.count_keys_before(cutoff) == 3
    assert store.prune_keys_before(cutoff, limit=2) == 2
    assert store.prune_keys_before(cutoff, limit=2) == 1
    assert store.prune_keys_before(cutoff, limit=2) == 0
    assert [store.lookup(op) for op in old] == [None, None, None]
    assert store.lookup(kept) is not None
    assert store.count_effects() == 1 and _records(store) == 1


def test_a_pruned_key_can_be_applied_again(store: EffectStore) -> None:
    operation_id = _apply_at(store, T0)
    assert store.prune_keys_before(T0 + timedelta(seconds=1), limit=10) == 1
    # Why the reconciler never re-drives past the retention: the key no longer deduplicates.
    again = store.apply(_effect(operation_id), Receipt("rcpt-" + "f" * 32, operation_id, T0 + timedelta(days=1)))
    assert again.outcome.value == "CREATED"


def test_prune_keys_works_in_batches_until_none_is_left_and_a_dry_run_deletes_nothing(store: EffectStore) -> None:
    for n in range(5):
        _apply_at(store, T0 + timedelta(seconds=n))
    now = T0 + timedelta(seconds=100)
    assert prune_keys(store, timedelta(seconds=10), now, dry_run=True, batch=2) == 5
    assert store.count_effects() == 5
    assert prune_keys(store, timedelta(seconds=10), now, dry_run=False, batch=2) == 5
    assert store.count_effects() == 0 and _records(store) == 0


def _prune_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effect_receiver.main", "prune-keys", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=child_environment(),
    )


def test_the_prune_keys_command_reports_what_it_deletes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'receiver.db'}"
    engine = db.create_engine(url)
    migrate(engine)
    store = EffectStore(engine)
    old, new = _apply_at(store, T0), _apply_at(store, datetime.now(UTC))
    try:
        dry = _prune_command("--database-url", url, "--key-retention-seconds", "3600", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout) == {"command": "prune-keys", "dry_run": True, "keys": 1}
        assert "would delete 1 keys" in dry.stderr
        assert store.count_effects() == 2

        done = _prune_command("--database-url", url, "--key-retention-seconds", "3600")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"command": "prune-keys", "dry_run": False, "keys": 1}
        assert "deleted 1 keys" in done.stderr
        assert store.lookup(old) is None and store.lookup(new) is not None
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--database-url", "receiver.db"], id="no-retention"),
        pytest.param(["--database-url", "receiver.db", "--key-retention-seconds", "-1"], id="bad-retention"),
        pytest.param(["--key-retention-seconds", "60", "--older-than-days", "1"], id="unknown-flag"),
    ],
)
def test_the_prune_keys_command_refuses_bad_usage_and_changes_nothing(tmp_path: Path, args: list[str]) -> None:
    args = [a.replace("receiver.db", str(tmp_path / "receiver.db")) for a in args]
    done = _prune_command(*args)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()  # the refusal alone, without the usage text
    assert line.startswith("decisionflow-receiver prune-keys: error: "), line
    assert not (tmp_path / "receiver.db").exists()


def test_the_server_prunes_keys_older_than_its_retention(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(receiver={"key_retention": timedelta(seconds=1), "prune_interval_seconds": 0.2})
    payload = payload_for(operation_id := new_operation_id())
    request = effect_receiver_pb2.ApplyRequest(
        operation_id=operation_id,
        case_id=CASE_ID,
        kind="record_support_review",
        payload=payload,
        payload_digest=hashlib.sha256(payload).hexdigest(),
    )
    stack.receiver().Apply(request, timeout=5)
    assert stack.effects() == 1
    give_up = time.monotonic() + 30
    while stack.effects() and time.monotonic() < give_up:
        time.sleep(0.1)
    assert stack.effects() == 0
    assert lookup(stack, operation_id).status == common_pb2.LOOKUP_STATUS_NOT_FOUND


@pytest.mark.slow
def test_a_pruned_key_is_escalated_by_the_reconciler_never_applied_again(make_stack: Callable[..., Stack]) -> None:
    retention = timedelta(seconds=2)
    # Every Apply commits and loses its reply: the operation is Unknown with its effect written.
    stack = make_stack(
        receiver_failpoints=LOST_REPLY,
        receiver={"key_retention": retention, "prune_interval_seconds": 0},
        receiver_timeout_seconds=1.0,
    )
    op = approve_unknown(stack, "PRUNED-1")
    assert stack.effects("PRUNED-1") == 1
    time.sleep(retention.total_seconds() + 0.5)
    done = _prune_command("--database-url", stack.receiver_url, "--key-retention-seconds", "2")
    assert json.loads(done.stdout)["keys"] == 1, done.stderr
    assert lookup(stack, op).status == common_pb2.LOOKUP_STATUS_NOT_FOUND

    summary = reconcile(stack)
    assert summary.escalated == 1
    assert summary.redriven.total == 0
    # No Apply reached the receiver: one would have written the effect again (the key is gone).
    assert stack.effects("PRUNED-1") == 0
