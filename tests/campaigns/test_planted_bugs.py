"""The partition and full-disk campaigns catch a removed guarantee (``--planted-bugs``; about 70 s).

Each plant copies the tree to a scratch directory, removes one guard there by a text patch, and
runs one scenario of the copy: the scenario must fail, and its output must show the checker's
violation. The tree under test is never changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Plant:
    """One guard removed by text patches (file, guard, replacement) and the scenario that must catch it."""

    name: str
    patches: tuple[tuple[str, str, str], ...]
    scenario: str
    caught_by: tuple[str, ...]  # any of these in the scenario's output is the checker's report


PARTITIONS = "tests/campaigns/test_partitions.py"
CUT = PARTITIONS + "::test_a_cut_mid_approve_then_healed_settles_in_one_pass"
# The receiver's once-per-key: the unique operation_id of effects, and the records keyed by it.
DEDUP_REMOVED = (
    (
        "effect_receiver/migrations/versions/0001_initial.py",
        '        sa.UniqueConstraint("operation_id", name="uq_effects_operation_id"),\n',
        "",
    ),
    (
        "effect_receiver/migrations/versions/0001_initial.py",
        'sa.Column("operation_id", sa.String(80), primary_key=True),',
        'sa.Column("operation_id", sa.String(80), nullable=False),',
    ),
    (
        "effect_receiver/migrations/versions/0001_initial.py",
        '        sa.ForeignKeyConstraint(["operation_id"], ["effects.operation_id"], '
        'name="fk_support_review_records_effect"),\n',
        "",
    ),
    ("effect_receiver/store.py", ".on_conflict_do_nothing(index_elements=[effects.c.operation_id])", ""),
)
UNKNOWN_AS_COMMITTED = (("orchestrator/domain.py", "}.get(state, Outcome.UNKNOWN)", "}.get(state, Outcome.COMMITTED)"),)
DUPLICATE = ("effects for one operation id",)
FALSE_COMMIT = ("approval answered COMMITTED but", "clients were told receipts")

PLANTS = (
    Plant("receiver_dedup_removed-cut_replies", DEDUP_REMOVED, CUT + "[replies]", DUPLICATE),
    Plant(
        "receiver_dedup_removed-degraded",
        DEDUP_REMOVED,
        PARTITIONS + "::test_a_degraded_link_settles_in_one_pass",
        DUPLICATE,
    ),
    Plant("unknown_reported_as_committed-cut_requests", UNKNOWN_AS_COMMITTED, CUT + "[requests]", FALSE_COMMIT),
    Plant("unknown_reported_as_committed-cut_both", UNKNOWN_AS_COMMITTED, CUT + "[both]", FALSE_COMMIT),
    Plant(
        "full_disk_error_unmapped",
        (
            (
                "decisionflow_server/storage/transactions.py",
                "= (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError)",
                "= (sa.exc.InterfaceError, sa.exc.TimeoutError)",
            ),
        ),
        "tests/campaigns/test_full_disk.py",
        ("apply_while_full=UNKNOWN", "apply_while_full=INTERNAL"),
    ),
)


def scratch_copy(destination: Path) -> Path:
    """Copy the tracked (and new, unignored) files of the tree, as they are on disk, to destination."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def plant(tree: Path, patches: tuple[tuple[str, str, str], ...]) -> None:
    """Apply the text patches; each guard must be found exactly once (else the plant is stale)."""
    for file, guard, replacement in patches:
        path = tree / file
        text = path.read_text(encoding="utf-8")
        assert text.count(guard) == 1, f"guard not found once in {file}: {guard!r}"
        path.write_text(text.replace(guard, replacement), encoding="utf-8")


@pytest.mark.campaign
@pytest.mark.slow
@pytest.mark.parametrize("planted", PLANTS, ids=[p.name for p in PLANTS])
def test_a_planted_bug_is_caught(planted: Plant, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The scenario run against a copy with the guard removed fails with the checker's violation."""
    if not request.config.getoption("--planted-bugs"):
        pytest.skip("planted-bug runs take about 70 s: run with --planted-bugs")
    tree = scratch_copy(tmp_path / "tree")
    plant(tree, planted.patches)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DECISIONFLOW_CAMPAIGN"))}
    # python -m puts the scratch tree first on sys.path, ahead of the installed (editable) tree.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", planted.scenario,
         f"--basetemp={tmp_path / 'run'}", "--partition-ops", "16", "--disk-ops", "8"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    sys.stdout.write(f"\nplanted {planted.name} in {planted.scenario}:\n")
    sys.stdout.write("\n".join(line for line in output.splitlines() if "campaign " in line or line.startswith("E ")))
    sys.stdout.write("\n")
    assert done.returncode == 1, f"the scenario did not fail against the planted bug:\n{output[-4000:]}"
    assert any(text in output for text in planted.caught_by), output[-4000:]
