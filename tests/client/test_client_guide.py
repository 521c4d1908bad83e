"""docs/clients.md's failure table (generated from decisionflow.reasons) is what the clients do: the
Python error classes and retry policy and the TypeScript refusal helper each give every row's answer,
and every declared reason has its row with its metadata keys."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from decisionflow import reasons, retry
from decisionflow.client import errors
from tests.support.typescript import TypeScriptPackage

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
ROW = re.compile(
    r"^\| (`[A-Z_]+`|any other \(.*?\)) \| (`[A-Z_]+`|—) \| (yes|no) \| (automatic|yes|no) \| (.*) \| `(\w+)` \|$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Row:
    """One row of the guide's failure table."""

    code: grpc.StatusCode
    reason: str
    definite: bool
    retry: str
    metadata_keys: frozenset[str]
    raised_as: str


def guide_rows() -> list[Row]:
    """Parse the table under "What a failure means"."""
    section = GUIDE.read_text(encoding="utf-8").split("## What a failure means", 1)[1].split("\n## ", 1)[0]
    rows = [
        Row(
            grpc.StatusCode[status],
            reason.strip("`") if reason != "—" else "",
            definite == "yes",
            retried,
            frozenset(re.findall(r"`([a-z_]+)`", metadata.split(" (", 1)[0])),  # a parenthesis explains
            raised_as,
        )
        for statuses, reason, definite, retried, metadata, raised_as in ROW.findall(section)
        # "any other (`UNKNOWN`, `INTERNAL`, …)" is a row for each status it names.
        for status in re.findall(r"`([A-Z_]+)`", statuses)
    ]
    table_rows = re.findall(r"^\| (?:`|any other)", section, re.MULTILINE)
    assert len(ROW.findall(section)) == len(table_rows), "a row of the table does not parse"
    return rows


def _python_retry(code: grpc.StatusCode, definite: bool) -> str:
    if code in retry.RETRYABLE_CODES:
        return "automatic"
    return "no" if definite else "yes"


def test_the_table_names_every_declared_reason_once_with_its_metadata_keys() -> None:
    rows = guide_rows()
    named = [row.reason for row in rows if row.reason]

    assert sorted(named) == sorted(reasons.REFUSALS)
    assert len(named) == len(set(named))
    for row in rows:
        if row.reason:
            declared = reasons.refusal(row.reason)
            assert (row.code.name, row.metadata_keys) == (declared.status, frozenset(declared.metadata)), row.reason
        else:
            assert row.metadata_keys == set(), row.code
    assert {row.code for row in rows if not row.reason} >= {grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED}


def test_the_python_client_raises_what_the_table_says() -> None:
    for row in guide_rows():
        cls = errors.error_class(row.code, row.reason)
        error = cls(row.code, "", reason=row.reason)
        assert cls.__name__ == row.raised_as, row
        assert (error.definite, _python_retry(row.code, error.definite)) == (row.definite, row.retry), row
    # A caller-dependent refusal after an indeterminate attempt is not definite.
    assert errors.PermissionDenied(grpc.StatusCode.PERMISSION_DENIED, "", attempts=2, definite=False).definite is False


@pytest.mark.slow
def test_the_typescript_helper_answers_what_the_table_says(typescript_package: TypeScriptPackage) -> None:
    rows = guide_rows()
    script = """
import { REASONS, contractOf } from "./dist/src/refusal.js";
const rows = JSON.parse(process.argv[1]);
const answers = rows.map(([code, reason]) => contractOf(code, reason));
const repeated = rows.map(([code, reason]) => contractOf(code, reason, 2).definite);
console.log(JSON.stringify({ reasons: REASONS, answers, repeated }));
"""
    pairs = [[row.code.value[0], row.reason] for row in rows]

    done = typescript_package.run("--input-type=module", "-e", script, json.dumps(pairs))

    assert done.returncode == 0, done.stderr
    told = json.loads(done.stdout)
    named = {row.reason: row for row in rows if row.reason}
    assert sorted(told["reasons"]) == sorted(named)
    for reason, contract in told["reasons"].items():
        assert contract["code"] == named[reason].code.value[0], reason
        assert set(contract["metadataKeys"]) == named[reason].metadata_keys, reason
    for row, answer in zip(rows, told["answers"], strict=True):
        assert (answer["definite"], answer["retry"]) == (row.definite, row.retry), row
    caller_dependent = {grpc.StatusCode[rule.status] for rule in reasons.STATUS_RULES if rule.caller_dependent}
    assert grpc.StatusCode.PERMISSION_DENIED in caller_dependent
    # After an earlier attempt, a refusal whose status alone is indeterminate (CHECKPOINT_SAVE_FAILED's
    # UNAVAILABLE) speaks only for its own attempt, as a caller-dependent one does.
    indeterminate = {grpc.StatusCode[rule.status] for rule in reasons.STATUS_RULES if not rule.definite}
    for row, definite in zip(rows, told["repeated"], strict=True):
        assert definite == (row.definite and row.code not in caller_dependent | indeterminate), row


def test_the_guides_unknown_retry_pattern_is_the_tested_examples_code() -> None:
    section = GUIDE.read_text(encoding="utf-8").split("## Outcome Unknown", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    example = (GUIDE.parents[1] / "examples" / "approve_async.py").read_text(encoding="utf-8")
    assert blocks and any("retry_if_result(_unknown)" in block for block in blocks)
    for block in blocks:
        assert block in example, f"docs/clients.md shows code examples/approve_async.py does not hold:\n{block}"
