"""``decisionflow ops`` run as the operator runs it (a subprocess) against a real orchestrator and receiver
with authentication on: the table and JSON Lines of ``list`` and its filters, ``describe``'s fields,
``redrive`` settling an Unknown, ``settle`` recording a lookup, and bad input refused with one line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from decisionflow.v1 import common_pb2, effect_receiver_pb2
from decisionflow_server.runtime.server_security import ServerSecurity
from tests.support.reconciling import AFTER_ATTEMPT, age_first_attempt
from tests.support.review_cli import Cli, proposal_file

# Real services, processes or a browser: make check leaves this module out; make test runs it.
pytestmark = pytest.mark.slow

LOSE_EVERY_REPLY = "receiver.commit_then_lose_reply=raise"
UNKNOWN_OPERATION = "op-v1-" + "0" * 64
HOUR = timedelta(hours=1)


@dataclass
class Done:
    """A finished ``decisionflow ops`` process."""

    exit_code: int
    stdout: str
    stderr: str

    def json_lines(self) -> list[dict[str, object]]:
        """stdout read as JSON Lines."""
        return [json.loads(line) for line in self.stdout.splitlines()]

    def json(self) -> dict[str, object]:
        """stdout read as one JSON object."""
        document = json.loads(self.stdout)
        assert isinstance(document, dict)
        return document


def ops(cli: Cli, *args: str, principal: str = "ops") -> Done:
    """Run ``decisionflow ops ARGS`` as a separate process, as principal."""
    argv = [sys.executable, "-m", "decisionflow_cli", "ops", *args, "--target", cli.target]
    argv += ["--token-file", str(cli.tokens[principal])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return Done(done.returncode, done.stdout, done.stderr)


def started(cli: Cli, directory: Path, case_id: str, hold_version: int = 2) -> str:
    run = cli("start", str(proposal_file(directory, case_id, hold_version)), principal="ava")
    assert run.exit_code == 0, run.stderr
    return str(run.document["operation_id"])


@dataclass
class Operations:
    """One operation in each state the receiver's lost replies allow, in cases T-1 to T-4."""

    unknown: str
    pending: str
    superseded: str
    replacing: str
    declined: str


def make_operations(cli: Cli, directory: Path) -> Operations:
    unknown = started(cli, directory, "T-1")
    # Long enough for the decision under a loaded 2-core machine (2 s was not, once, beside a container test);
    # the receiver loses every reply, so the answer is Unknown at the deadline.
    assert cli("approve", unknown, "--timeout", "4").exit_code == 42
    pending = started(cli, directory, "T-2")
    superseded = started(cli, directory, "T-3")
    edit = directory / "T-3-edit.json"
    document = json.loads(proposal_file(directory, "T-3", 4).read_text())
    edit.write_text(json.dumps({key: document[key] for key in ("body", "evidence", "policy")}))
    replacing = cli("edit", superseded, str(edit), principal="ava")
    assert replacing.exit_code == 0, replacing.stderr
    declined = started(cli, directory, "T-4")
    assert cli("decline", declined).exit_code == 0
    return Operations(unknown, pending, superseded, str(replacing.document.get("operation_id", "")), declined)


@pytest.fixture
def stuck(make_cli: Callable[..., Cli], tmp_path: Path) -> tuple[Cli, Operations]:
    """A stack whose receiver loses every reply, and operations in several states."""
    cli = make_cli(receiver_failpoints=LOSE_EVERY_REPLY)
    return cli, make_operations(cli, tmp_path)


def _restart_without_faults(cli: Cli) -> None:
    # The orchestrator dials the receiver's port at start, so it follows the new receiver.
    cli.stack.start_receiver("")
    cli.stack.stop_orchestrator()
    credentials = cli.tokens["ops"].parent / "credentials.json"
    cli.stack.start_orchestrator(security=ServerSecurity(credentials_file=credentials))


def test_list_shows_open_operations_as_a_table_and_filters_by_state_and_case(stuck: tuple[Cli, Operations]) -> None:
    cli, op = stuck

    default = ops(cli, "list")
    pending = ops(cli, "list", "--state", "Pending_Review", "--json")
    several = ops(cli, "list", "--state", "superseded,declined", "--state", "unknown", "--json")
    of_case = ops(cli, "list", "--state", "pending_review", "--state", "superseded", "--case", "T-3", "--json")
    none_old_enough = ops(cli, "list", "--older-than", "2h", "--json")
    limited = ops(cli, "list", "--state", "pending_review,superseded", "--limit", "1", "--json")

    assert default.exit_code == 0, default.stderr
    header, *rows = default.stdout.splitlines()
    assert header.split() == ["OPERATION", "CASE", "STATE", "DECISION", "ATTEMPTS", "AGE", "LAST", "LOOKUP"]
    assert [row.split()[:5] for row in rows] == [[op.unknown, "T-1", "UNKNOWN", "APPROVE", rows[0].split()[4]]]
    assert int(rows[0].split()[4]) >= 1 and rows[0].split()[-1] == "-"  # attempted, never looked up
    assert "1 operation(s) in APPROVED, UNKNOWN" in default.stderr

    assert pending.exit_code == 0, pending.stderr
    shown = {str(o["operation_id"]): o["state"] for o in pending.json_lines()}
    # PENDING_REVIEW never lists the proposal an edit replaced: it is SUPERSEDED.
    assert shown == {op.pending: "PENDING_REVIEW", op.replacing: "PENDING_REVIEW"}
    assert {str(o["operation_id"]): o["state"] for o in several.json_lines()} == {
        op.unknown: "UNKNOWN",
        op.superseded: "SUPERSEDED",
        op.declined: "DECLINED",
    }
    assert [o["operation_id"] for o in of_case.json_lines()] in (
        [op.superseded, op.replacing],
        [op.replacing, op.superseded],
    )
    assert {o["case_id"] for o in of_case.json_lines()} == {"T-3"}
    assert none_old_enough.exit_code == 0 and none_old_enough.stdout == ""
    assert limited.exit_code == 0 and len(limited.json_lines()) == 1


def test_describe_prints_every_field_and_the_last_lookup_after_settle(stuck: tuple[Cli, Operations]) -> None:
    cli, op = stuck

    before = ops(cli, "describe", op.unknown, "--json")
    noted = ops(cli, "settle", op.unknown, "--status", "not_found", "--consistency", "eventual")
    text = ops(cli, "describe", op.unknown)
    after = ops(cli, "describe", op.unknown, "--json")

    assert before.exit_code == 0, before.stderr
    document = before.json()
    assert document["state"] == "UNKNOWN" and document["decision"] == "APPROVE" and document["reviewer"] == "rita"
    assert isinstance(document["attempts"], int) and document["attempts"] >= 1
    assert document["first_attempt_at"] and document["decided_at"] and document["last_lookup"] is None
    assert document["receipt"] is None and document["rejection_reason"] == ""
    assert isinstance(document["age_seconds"], float) and isinstance(document["seconds_since_decision"], float)
    assert noted.exit_code == 0, noted.stderr
    assert f"{op.unknown}: lookup recorded; state UNKNOWN" in noted.stdout
    assert text.exit_code == 0
    fields = dict(line.split(":", 1) for line in text.stdout.splitlines())
    assert fields["state"].strip() == "UNKNOWN" and fields["reviewer"].strip() == "rita"
    assert fields["last lookup"].strip().startswith("NOT_FOUND/EVENTUAL")
    assert fields["  consistency"].strip() == "EVENTUAL"
    last_lookup = after.json()["last_lookup"]
    assert isinstance(last_lookup, dict)
    assert last_lookup["status"] == "NOT_FOUND" and last_lookup["consistency"] == "EVENTUAL"
    assert last_lookup["looked_up_at"]
    assert after.json()["state"] == "UNKNOWN"  # a lookup that found nothing settles nothing


def test_redrive_settles_an_unknown_once_the_receiver_answers(stuck: tuple[Cli, Operations]) -> None:
    cli, op = stuck
    _restart_without_faults(cli)

    redriven = ops(cli, "redrive", op.unknown, "--json")
    again = ops(cli, "redrive", op.unknown)
    declined = ops(cli, "redrive", op.declined)

    assert redriven.exit_code == 0, redriven.stderr
    assert redriven.json()["outcome"] == "COMMITTED"
    operation = redriven.json()["operation"]
    assert isinstance(operation, dict) and operation["state"] == "COMMITTED" and operation["receipt"]
    assert cli.stack.effects("T-1") == 1  # the lost reply's effect, replayed, not written again
    assert again.exit_code == 3 and again.stdout == ""
    assert again.stderr.count("\n") == 1 and "NOT_REDRIVABLE" in again.stderr
    assert declined.exit_code == 3 and "NOT_REDRIVABLE" in declined.stderr
    assert cli.stack.effects("T-4") == 0


def test_redrive_past_the_receivers_key_retention_says_escalate_with_its_own_exit_code(
    make_cli: Callable[..., Cli], tmp_path: Path
) -> None:
    # The attempt is recorded, then the orchestrator fails before Apply: the receiver never saw the key.
    cli = make_cli(receiver={"key_retention": HOUR, "prune_interval_seconds": 0}, failpoints=AFTER_ATTEMPT)
    op = started(cli, tmp_path, "T-9")
    assert cli("approve", op).exit_code == 1
    cli.stack.stop_orchestrator()
    cli.stack.start_orchestrator(security=ServerSecurity(credentials_file=tmp_path / "credentials.json"))
    age_first_attempt(cli.stack.orchestrator_url, op, 2 * HOUR)

    text = ops(cli, "redrive", op)
    as_json = ops(cli, "redrive", op, "--json")
    described = ops(cli, "describe", op, "--json")

    assert text.exit_code == 4, text.stderr
    assert text.stdout == f"outcome UNKNOWN for {op}: escalate (KEY_RETENTION_EXCEEDED)\n"
    assert text.stderr.count("\n") == 1 and text.stderr.startswith(f"escalate {op}: ")
    assert "KEY_RETENTION_EXCEEDED" in text.stderr and "never re-drive" in text.stderr
    assert "look it up later" not in text.stderr
    assert as_json.exit_code == 4
    document = as_json.json()
    assert document["escalate"] is True and document["outcome"] == "UNKNOWN"
    assert document["reason"] == "KEY_RETENTION_EXCEEDED" and document["operation_id"] == op
    assert document["key_retention"] == "3600s" and document["first_attempted_at"]
    assert described.json()["state"] == "UNKNOWN"
    assert cli.stack.effects("T-9") == 0


def test_settle_applied_with_the_receivers_receipt_commits(stuck: tuple[Cli, Operations]) -> None:
    cli, op = stuck
    answer = cli.stack.receiver().Lookup(effect_receiver_pb2.LookupRequest(operation_id=op.unknown), timeout=5)
    assert answer.result.status == common_pb2.LOOKUP_STATUS_APPLIED
    receipt_id = answer.result.receipt.receipt_id

    settled = ops(
        cli,
        "settle",
        op.unknown,
        "--status",
        "applied",
        "--consistency",
        "strong",
        "--receipt-id",
        receipt_id,
        "--observed-at",
        "2026-01-01T00:00:00Z",
        "--json",
    )
    committed = ops(cli, "list", "--state", "committed", "--json")

    assert settled.exit_code == 0, settled.stderr
    assert settled.json()["settled"] is True
    operation = settled.json()["operation"]
    assert isinstance(operation, dict) and operation["state"] == "COMMITTED"
    assert isinstance(operation["receipt"], dict) and operation["receipt"]["receipt_id"] == receipt_id
    assert isinstance(operation["last_lookup"], dict)
    assert operation["last_lookup"]["looked_up_at"].startswith("2026-01-01T00:00:00")
    assert [o["operation_id"] for o in committed.json_lines()] == [op.unknown]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--state", "stuck"], "unknown state 'stuck'"),
        (["list", "--older-than", "5 minutes"], "expected seconds or a number with s, m, h or d"),
        (["list", "--older-than=-5m"], "expected seconds or a number"),
        (["list", "--limit", "0"], "expected at least 1"),
        (["settle", UNKNOWN_OPERATION, "--status", "applied", "--consistency", "strong"], "needs --receipt-id"),
        (
            ["settle", UNKNOWN_OPERATION, "--status", "not_found", "--consistency", "strong", "--receipt-id", "r"],
            "takes no --receipt-id",
        ),
        (["settle", UNKNOWN_OPERATION, "--status", "gone", "--consistency", "strong"], "expected applied or not_found"),
        (
            ["settle", UNKNOWN_OPERATION, "--status", "not_found", "--consistency", "strong", "--observed-at", "now"],
            "expected an ISO 8601 time",
        ),
        (
            [
                "settle",
                UNKNOWN_OPERATION,
                "--status",
                "not_found",
                "--consistency",
                "strong",
                "--observed-at",
                "2026-01-01T00:00:00",
            ],
            "give the time's UTC offset",
        ),
        (
            [
                "settle",
                UNKNOWN_OPERATION,
                "--status",
                "not_found",
                "--consistency",
                "strong",
                "--observed-at",
                "2999-01-01T00:00:00Z",
            ],
            "is in the future",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_sends_nothing(
    make_cli: Callable[..., Cli], args: list[str], message: str
) -> None:
    cli = make_cli()

    done = ops(cli, *args)

    assert done.exit_code == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_refusals_exit_3_with_one_line(make_cli: Callable[..., Cli], tmp_path: Path) -> None:
    cli = make_cli()
    pending = started(cli, tmp_path, "T-2")

    unknown_id = ops(cli, "describe", UNKNOWN_OPERATION)
    not_approved = ops(cli, "redrive", pending)
    bad_case = ops(cli, "list", "--case", "T 1")
    not_operator = ops(cli, "list", principal="ava")

    for done in (unknown_id, not_approved, bad_case, not_operator):
        assert done.exit_code == 3, done.stderr
        assert done.stdout == "" and done.stderr.count("\n") == 1
    assert "NOT_FOUND" in unknown_id.stderr
    assert "NOT_REDRIVABLE" in not_approved.stderr
    assert "case_id" in bad_case.stderr
    assert "PERMISSION_DENIED" in not_operator.stderr


def receiver_lookup(cli: Cli, *args: str, principal: str = "ops") -> Done:
    """Run ``decisionflow receiver lookup ARGS`` as a separate process against the stack's receiver."""
    argv = [sys.executable, "-m", "decisionflow_cli", "receiver", "lookup", *args]
    argv += ["--target", f"127.0.0.1:{cli.stack.receiver_port}", "--token-file", str(cli.tokens[principal])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return Done(done.returncode, done.stdout, done.stderr)


def test_receiver_lookup_prints_the_answer_and_the_settle_command_that_records_it(
    stuck: tuple[Cli, Operations],
) -> None:
    cli, op = stuck
    applied = receiver_lookup(cli, op.unknown, "--json")
    absent = receiver_lookup(cli, op.pending)
    assert applied.exit_code == 0 and absent.exit_code == 0, applied.stderr + absent.stderr
    answer = applied.json()
    assert (answer["operation_id"], answer["status"], answer["consistency"]) == (op.unknown, "APPLIED", "STRONG")
    receipt = answer["receipt"]
    assert isinstance(receipt, dict) and receipt["receipt_id"] and receipt["operation_id"] == op.unknown
    assert str(answer["observed_at"]).endswith("+00:00")
    assert absent.stdout.startswith(f"{op.pending}: NOT_FOUND (STRONG, observed ")
    assert "--status not_found --consistency strong" in absent.stderr

    # The line on stderr is the command that records the answer; run as it reads, it commits.
    (suggested,) = applied.stderr.splitlines()
    assert suggested.startswith("record it at the orchestrator: decisionflow ops settle ")
    settle_args = shlex.split(suggested.split(": ", 1)[1])[3:]
    settled = ops(cli, "settle", *settle_args, "--json")
    assert settled.exit_code == 0, settled.stderr
    operation = settled.json()["operation"]
    assert isinstance(operation, dict) and operation["state"] == "COMMITTED"
    assert isinstance(operation["receipt"], dict) and operation["receipt"]["receipt_id"] == receipt["receipt_id"]


def test_receiver_lookup_refusals_exit_3_and_bad_ids_name_the_field(
    make_cli: Callable[..., Cli], tmp_path: Path
) -> None:
    cli = make_cli(receiver={"security": ServerSecurity(credentials_file=tmp_path / "credentials.json")})
    not_a_reader = receiver_lookup(cli, UNKNOWN_OPERATION, principal="rita")
    bad_id = receiver_lookup(cli, "op-1")
    for done in (not_a_reader, bad_id):
        assert done.exit_code == 3 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "PERMISSION_DENIED" in not_a_reader.stderr and "effect_reader" in not_a_reader.stderr
    assert "operation_id" in bad_id.stderr
