"""A rolling upgrade with real processes: the next release (a copy of this tree's packages plus one expand
migration per service) migrates the databases first, as the migration Job does; this release's
orchestrator and receiver, started ``--migrate off`` beside the next release's, still start and serve,
and an approval begun on one release and approved on the other commits once, both ways. After a contract
migration (a further copy) this release refuses to start while the next release runs; and this release
refuses a database at the previous revision, as before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from alembic import command

from decisionflow.v1 import common_pb2, effect_receiver_pb2, effect_receiver_pb2_grpc, review_pb2_grpc
from decisionflow_demo.launch import (
    CHECKPOINT_KEYS_ENV,
    ORCHESTRATOR_MODULE,
    RECEIVER_MODULE,
    orchestrator_args,
    receiver_args,
)
from decisionflow_demo.releases import SERVICE_PACKAGES
from decisionflow_server.foundation.processes import ServiceProcess, child_environment, launch
from decisionflow_server.storage import db
from effect_receiver.main import SCHEMA as RECEIVER_SCHEMA
from orchestrator.main import SCHEMA as ORCHESTRATOR_SCHEMA
from tests.support.stack import CHECKPOINT_KEY, approve, count, start_request

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = SERVICE_PACKAGES
ENV = {CHECKPOINT_KEYS_ENV: CHECKPOINT_KEY}
THIS_ORCHESTRATOR, THIS_RECEIVER = ORCHESTRATOR_SCHEMA.head, RECEIVER_SCHEMA.head
NEXT_ORCHESTRATOR, NEXT_RECEIVER = f"{int(THIS_ORCHESTRATOR) + 1:04d}", f"{int(THIS_RECEIVER) + 1:04d}"
CONTRACT_ORCHESTRATOR, CONTRACT_RECEIVER = f"{int(THIS_ORCHESTRATOR) + 2:04d}", f"{int(THIS_RECEIVER) + 2:04d}"


def _migration(revision: str, down: str, compatibility: str, upgrade: str, downgrade: str) -> str:
    return f'''"""A later release's migration, written by the rolling-upgrade test."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from decisionflow_server.storage.schema_compatibility import Contract, Expand

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
compatibility = {compatibility}


def upgrade() -> None:
{upgrade}


def downgrade() -> None:
{downgrade}
'''


NOTES_TABLE = """    op.create_table(
        "operation_notes",
        sa.Column("operation_id", sa.String(70), primary_key=True),
        sa.Column("note", sa.Text(), nullable=True),
    )"""
NEXT = {
    "orchestrator": (
        f"{NEXT_ORCHESTRATOR}_operation_notes.py",
        _migration(
            NEXT_ORCHESTRATOR,
            THIS_ORCHESTRATOR,
            f'Expand(oldest="{THIS_ORCHESTRATOR}")',
            NOTES_TABLE,
            '    op.drop_table("operation_notes")',
        ),
    ),
    "effect_receiver": (
        f"{NEXT_RECEIVER}_effects_by_time.py",
        _migration(
            NEXT_RECEIVER,
            THIS_RECEIVER,
            f'Expand(oldest="{THIS_RECEIVER}")',
            '    op.create_index("ix_effects_applied_at", "effects", ["applied_at"])',
            '    op.drop_index("ix_effects_applied_at", table_name="effects")',
        ),
    ),
}
CONTRACT = {
    "orchestrator": (
        f"{CONTRACT_ORCHESTRATOR}_drop_operation_notes.py",
        _migration(
            CONTRACT_ORCHESTRATOR,
            NEXT_ORCHESTRATOR,
            f'Contract(oldest="{NEXT_ORCHESTRATOR}")',
            '    op.drop_table("operation_notes")',
            NOTES_TABLE,
        ),
    ),
    "effect_receiver": (
        f"{CONTRACT_RECEIVER}_drop_effects_by_time.py",
        _migration(
            CONTRACT_RECEIVER,
            NEXT_RECEIVER,
            f'Contract(oldest="{NEXT_RECEIVER}")',
            '    op.drop_index("ix_effects_applied_at", table_name="effects")',
            '    op.create_index("ix_effects_applied_at", "effects", ["applied_at"])',
        ),
    ),
}


def release(destination: Path, *migrations: dict[str, tuple[str, str]]) -> Path:
    """Copy this tree's packages to destination and add migrations; ``python -m`` run there imports the copy."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))
    for added in migrations:
        for package, (name, source) in added.items():
            (destination / package / "migrations" / "versions" / name).write_text(source, encoding="utf-8")
    return destination


def run(module: str, args: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` in cwd (a release copy; None: this release) and wait for it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=child_environment(ENV),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def migrate(module: str, url: str, *flags: str, cwd: Path | None = None) -> tuple[int, dict[str, object], str]:
    """Run ``migrate`` of a release; return its exit status, its JSON line and its stderr."""
    done = run(module, ["migrate", "--database-url", url, *flags], cwd)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a server that refused to start logged."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    return str(json.loads(lines[0])["message"])


@contextmanager
def serving(
    module: str, args: Sequence[str], workdir: Path, name: str, cwd: Path | None = None
) -> Iterator[ServiceProcess]:
    """A server of a release (cwd: its copy), started and SERVING; stopped, gracefully, on exit."""
    process = launch(module, [*args, "--migrate", "off"], workdir, name, env=ENV, cwd=cwd)
    try:
        process.wait_ready()
        process.wait_serving()
        yield process
    finally:
        assert process.stop() == 0, process.stderr()


def approve_across(begin: ServiceProcess, finish: ServiceProcess, case_id: str) -> tuple[str, str]:
    """Start a review on begin, approve it on finish; return the operation id and the receipt."""
    with grpc.insecure_channel(begin.target) as first, grpc.insecure_channel(finish.target) as second:
        started = review_pb2_grpc.ReviewServiceStub(first).StartReview(start_request(case_id=case_id), timeout=20)
        operation_id = started.proposal.operation_id
        result = review_pb2_grpc.ReviewServiceStub(second).Approve(approve(operation_id), timeout=30)
    assert result.outcome == common_pb2.OUTCOME_COMMITTED, result
    return operation_id, result.operation.receipt.receipt_id


def lookup(receiver: ServiceProcess, operation_id: str) -> effect_receiver_pb2.LookupResult:
    with grpc.insecure_channel(receiver.target) as channel:
        stub = effect_receiver_pb2_grpc.EffectReceiverServiceStub(channel)
        return stub.Lookup(effect_receiver_pb2.LookupRequest(operation_id=operation_id), timeout=10).result


def at_revision(url: str, schema_script_location: Path, version_table: str, revision: str) -> None:
    """Bring a database to an older revision of this release, as the previous release left it."""
    engine = db.create_engine(url, pool_size=1)
    config = db.alembic_config(schema_script_location, version_table)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


@pytest.mark.slow
def test_old_and_new_replicas_serve_one_rollout_and_a_contract_retires_the_old(
    database_url: str, tmp_path: Path
) -> None:
    # Both services share a PostgreSQL database (their tables and version tables differ); on SQLite each
    # has its file.
    orchestrator_url = database_url
    receiver_url = database_url if database_url.startswith("postgresql") else f"sqlite:///{tmp_path / 'receiver.db'}"
    logs = tmp_path / "logs"
    logs.mkdir()
    next_release = release(tmp_path / "next", NEXT)
    contract_release = release(tmp_path / "contract", NEXT, CONTRACT)

    # The previous release's schema: this release refuses to start on it, as before.
    at_revision(orchestrator_url, ORCHESTRATOR_SCHEMA.script_location, ORCHESTRATOR_SCHEMA.version_table, "0004")
    at_revision(receiver_url, RECEIVER_SCHEMA.script_location, RECEIVER_SCHEMA.version_table, "0001")
    old_on_previous = run(
        ORCHESTRATOR_MODULE, [*orchestrator_args(orchestrator_url, "127.0.0.1:1"), "--migrate", "off"]
    )
    receiver_on_previous = run(RECEIVER_MODULE, [*receiver_args(receiver_url), "--migrate", "off"])
    assert f"found revision 0004, needs revision {THIS_ORCHESTRATOR}" in refusal(old_on_previous)
    assert f"found revision 0001, needs revision {THIS_RECEIVER}" in refusal(receiver_on_previous)

    # The migration Job of the next release, from the previous release's schema.
    orchestrator_job = migrate(ORCHESTRATOR_MODULE, orchestrator_url, cwd=next_release)
    receiver_job = migrate(RECEIVER_MODULE, receiver_url, cwd=next_release)
    assert orchestrator_job[:2] == (
        0,
        {"command": "migrate", "show": False, "before": "0004", "after": NEXT_ORCHESTRATOR},
    )
    assert receiver_job[:2] == (0, {"command": "migrate", "show": False, "before": "0001", "after": NEXT_RECEIVER})
    next_shown = migrate(ORCHESTRATOR_MODULE, orchestrator_url, "--show", cwd=next_release)[1]
    assert next_shown["head"] == NEXT_ORCHESTRATOR and next_shown["at_head"] is True  # the copy ran, not this tree

    # This release reads the record: it runs on the newer schema, and its own migration Job changes nothing.
    shown = migrate(ORCHESTRATOR_MODULE, orchestrator_url, "--show")
    this_job = migrate(RECEIVER_MODULE, receiver_url)
    assert shown[1] == {
        "command": "migrate",
        "show": True,
        "current": NEXT_ORCHESTRATOR,
        "head": THIS_ORCHESTRATOR,
        "at_head": False,
        "oldest_compatible": THIS_ORCHESTRATOR,
        "compatible": True,
    }
    assert this_job[:2] == (0, {"command": "migrate", "show": False, "before": NEXT_RECEIVER, "after": NEXT_RECEIVER})
    assert "nothing to migrate" in this_job[2]

    with (
        serving(RECEIVER_MODULE, receiver_args(receiver_url), logs, "old-receiver") as old_receiver,
        serving(RECEIVER_MODULE, receiver_args(receiver_url), logs, "next-receiver", next_release) as next_receiver,
        serving(
            ORCHESTRATOR_MODULE, orchestrator_args(orchestrator_url, old_receiver.target), logs, "old-orchestrator"
        ) as old_orchestrator,
        serving(
            ORCHESTRATOR_MODULE,
            orchestrator_args(orchestrator_url, next_receiver.target),
            logs,
            "next-orchestrator",
            next_release,
        ) as next_orchestrator,
    ):
        forward = approve_across(old_orchestrator, next_orchestrator, "T-2001")
        backward = approve_across(next_orchestrator, old_orchestrator, "T-2002")
        found = [
            lookup(receiver, op).receipt.receipt_id
            for receiver in (old_receiver, next_receiver)
            for op, _ in (forward, backward)
        ]
        old_log = old_orchestrator.log() + old_receiver.log()

    assert found == [forward[1], backward[1]] * 2
    for operation_id, _ in (forward, backward):
        assert count(receiver_url, f"SELECT count(*) FROM effects WHERE operation_id = '{operation_id}'") == 1
        assert (
            count(
                orchestrator_url,
                f"SELECT count(*) FROM operations WHERE operation_id = '{operation_id}' AND state = 'committed'",
            )
            == 1
        )
    assert (
        f"found revision {NEXT_ORCHESTRATOR}, newer than this release's head {THIS_ORCHESTRATOR}, compatible from "
        f"{THIS_ORCHESTRATOR}: running without migrating" in old_log
    )
    assert f"found revision {NEXT_RECEIVER}, newer than this release's head {THIS_RECEIVER}" in old_log

    # A contract one release later: the next release still runs; this one refuses under either mode.
    assert migrate(ORCHESTRATOR_MODULE, orchestrator_url, cwd=contract_release)[0] == 0
    assert migrate(RECEIVER_MODULE, receiver_url, cwd=contract_release)[0] == 0
    refused_off = run(ORCHESTRATOR_MODULE, [*orchestrator_args(orchestrator_url, "127.0.0.1:1"), "--migrate", "off"])
    refused_auto = run(ORCHESTRATOR_MODULE, [*orchestrator_args(orchestrator_url, "127.0.0.1:1"), "--migrate", "auto"])
    receiver_refused = run(RECEIVER_MODULE, [*receiver_args(receiver_url), "--migrate", "off"])
    this_job = migrate(ORCHESTRATOR_MODULE, orchestrator_url)
    shown_after = migrate(ORCHESTRATOR_MODULE, orchestrator_url, "--show")[1]
    with (
        serving(RECEIVER_MODULE, receiver_args(receiver_url), logs, "next-receiver-2", next_release) as next_receiver,
        serving(
            ORCHESTRATOR_MODULE,
            orchestrator_args(orchestrator_url, next_receiver.target),
            logs,
            "next-orchestrator-2",
            next_release,
        ),
    ):
        pass

    expected = (
        f"found revision {CONTRACT_ORCHESTRATOR}, newer than this release's head {THIS_ORCHESTRATOR}, compatible from "
        f"{NEXT_ORCHESTRATOR}; upgrade this replica's release to one that ships revision {NEXT_ORCHESTRATOR}"
    )
    for done in (refused_off, refused_auto):
        message = refusal(done)
        assert message.startswith("decisionflow-orchestrator: the database schema is newer than this release runs on")
        assert expected in message
    assert f"compatible from {NEXT_RECEIVER}; upgrade this replica's release" in refusal(receiver_refused)
    assert this_job[0] == 2 and expected in this_job[2]
    assert (shown_after["current"], shown_after["oldest_compatible"], shown_after["compatible"]) == (
        CONTRACT_ORCHESTRATOR,
        NEXT_ORCHESTRATOR,
        False,
    )
