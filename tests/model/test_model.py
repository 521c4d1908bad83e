"""The protocol model (model/decisionflow.pml) checked exhaustively by spin.

The full model must pass with ``errors: 0`` under each set of bounds; each seeded fault (one
guard removed with a ``-D`` switch) must fail the property that guard protects, with a
counterexample trail that spin replays. ``--model-depth deep`` checks larger bounds.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

# spin compiles and searches the model (about 60 s of CPU in all): `make test` runs it, `make check` does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "model" / "decisionflow.pml"
# Verifiers already compiled, by what they were compiled from (git-ignored): a later run searches again, compiles
# only what changed.
VERIFIERS = ROOT / ".venvs" / "spin-verifiers"
SEARCH_DEPTH = 1_000_000
# A run that takes longer than this is a model grown too large, not a slow machine.
RUN_TIMEOUT_SECONDS = 1800


@dataclass(frozen=True)
class Bounds:
    """One configuration of the model: its -D switches and whether it checks the ltl formula."""

    name: str
    defines: tuple[str, ...]
    liveness: bool = False


@dataclass(frozen=True)
class SpinRun:
    """What pan reported for one configuration."""

    output: str
    errors: int
    states: int
    depth: int
    trail: Path | None

    def summary(self) -> str:
        """One line: states stored and depth reached."""
        return f"errors: {self.errors}, states stored: {self.states}, depth reached: {self.depth}"


_RULES = ("RULES=1", "NOPS=1", "REVIEWERS=3", "LOSSES=0", "CRASHES=0", "RETRIES=0", "PASSES=0")

# CI bounds: each configuration is exhaustive for its bounds and all of them together finish
# well under two minutes on one core.
CI_BOUNDS = (
    Bounds("proposals", ("AUTHORS=2", "REVIEWERS=2", "LOSSES=0", "CRASHES=0", "RETRIES=0", "PASSES=0")),
    Bounds("commit", ("AUTHORS=1", "REVIEWERS=2", "LOSSES=1", "CRASHES=1", "RETRIES=1", "PASSES=1")),
    Bounds("failures", ("AUTHORS=1", "REVIEWERS=1", "LOSSES=2", "CRASHES=2", "RETRIES=2", "PASSES=2")),
    Bounds("liveness", ("LIVENESS", "AUTHORS=1", "REVIEWERS=1", "LOSSES=1", "CRASHES=1", "RETRIES=1"), True),
    # Time may pass beyond the key retention at any moment, even inside a request or a pass: the
    # receiver's own retention check keeps property 1 (docs/model.md, findings).
    Bounds(
        "age-anytime",
        ("AGE_ANYTIME", "AUTHORS=1", "REVIEWERS=2", "LOSSES=1", "CRASHES=1", "RETRIES=1", "PASSES=1"),
    ),
    Bounds(
        "age-anytime-failures",
        ("AGE_ANYTIME", "AUTHORS=1", "REVIEWERS=1", "LOSSES=2", "CRASHES=2", "RETRIES=2", "PASSES=2"),
    ),
    # The two-stage review rule (2 of {REVIEWER1, REVIEWER2, the author}, then 1 of {REVIEWER3}): every
    # approver, the author and the escalation reviewer race the deadlines job's escalations and expiry.
    Bounds("rules", _RULES),
    # A lost reply, a crash and retries against the rule (no REVIEWER3 and no author: the second
    # stage completes only through its escalation, and the escalation reviewer counts once).
    Bounds(
        "rules-failures",
        ("RULES=1", "NOPS=1", "REVIEWERS=2", "AUTHOR_APPROVES=0", "LOSSES=1", "CRASHES=1", "RETRIES=1", "PASSES=0"),
    ),
)

DEEP_BOUNDS = (
    Bounds("proposals-deep", ("AUTHORS=2", "REVIEWERS=2", "LOSSES=0", "CRASHES=0", "RETRIES=0", "PASSES=1")),
    Bounds("edits-deep", ("NOPS=3", "AUTHORS=2", "AUTHOR_REQS=2", "REVIEWERS=1", "LOSSES=0", "CRASHES=0", "PASSES=0")),
    Bounds("commit-deep", ("AUTHORS=1", "REVIEWERS=2", "LOSSES=2", "CRASHES=1", "RETRIES=2", "PASSES=2")),
    Bounds("failures-deep", ("AUTHORS=1", "REVIEWERS=1", "LOSSES=3", "CRASHES=3", "RETRIES=3", "PASSES=3")),
    Bounds("liveness-deep", ("LIVENESS", "AUTHORS=1", "REVIEWERS=2", "LOSSES=1", "CRASHES=1", "RETRIES=1"), True),
    # the escalation reviewer approves twice: once counted, in one stage only
    Bounds("rules-deep", (*_RULES, "ESCALATION_REQS=2")),
    # the author's Approve too, and a reconciler pass
    Bounds(
        "rules-failures-deep",
        ("RULES=1", "NOPS=1", "REVIEWERS=2", "LOSSES=1", "CRASHES=1", "RETRIES=1", "PASSES=1"),
    ),
)


@dataclass(frozen=True)
class Fault:
    """A guard removed, the bounds that expose it, and what spin must report."""

    switch: str
    bounds: tuple[str, ...]
    violation: str
    liveness: bool = False
    # a global's value the replayed trail must show on its way (spin -t -g prints each change)
    replay_shows: str | None = None


_SMALL = ("AUTHORS=1", "REVIEWERS=1", "PASSES=1")
_NO_FAILURES = ("LOSSES=0", "CRASHES=0", "PASSES=0")
FAULTS = (
    # property 1: a second Apply of a key writes a second effect
    Fault("NO_UNIQUE_KEY", _SMALL, "assertion violated (written[op]<=1)"),
    # property 3: a later decision overwrites the recorded one
    Fault(
        "NO_CONFLICT_CHECK",
        ("AUTHORS=1", "REVIEWERS=2", *_NO_FAILURES),
        "assertion violated ((first_decision[op]==0)||(first_decision[op]==d))",
    ),
    # property 2: an old tab approves a proposal that is no longer current
    Fault(
        "NO_STALE_CHECK",
        ("AUTHORS=2", "REVIEWERS=1", *_NO_FAILURES),
        "assertion violated ((decision[op]==1)&&current_at_decision[op])",
    ),
    # property 1: applied but still APPROVED with no first attempt, so re-driven after the key is pruned
    Fault("NO_ATTEMPT_RECORD", (*_SMALL, "RETRIES=0"), "assertion violated (written[op]<=1)"),
    # property 1: a re-drive after the key retention writes the effect again (the receiver's own
    # retention check removed too: it alone would refuse that Apply)
    Fault("NO_RETENTION_RULE", (*_SMALL, "NO_RECEIVER_RETENTION"), "assertion violated (written[op]<=1)"),
    # property 4: a StartReview silently replaces an acknowledged open proposal
    Fault(
        "NO_OPEN_CHECK",
        ("AUTHORS=2", "REVIEWERS=1", *_NO_FAILURES),
        "assertion violated ((((current==0)|| !(acked_proposal[current]))||(decision[current]!=0))||(exp==current))",
    ),
    # property 1: the receiver applies a key it may have pruned when time passes beyond the
    # retention inside a request: a client's retried Approve re-applies it (docs/model.md)
    Fault("NO_RECEIVER_RETENTION", (*_SMALL, "AGE_ANYTIME"), "assertion violated (written[op]<=1)"),
    # property 6: a receiver that answers only from a lagging replica never lets UNKNOWN settle
    Fault("EVENTUAL_LOOKUPS", ("LIVENESS", "AUTHORS=1", "REVIEWERS=1"), "acceptance cycle", liveness=True),
    # property 6: a lease that never passes after its holder crashed pins the operation: every
    # re-drive meets it and answers Unknown, pass after pass
    Fault("NO_LEASE_EXPIRY", ("LIVENESS", "AUTHORS=1", "REVIEWERS=1"), "acceptance cycle", liveness=True),
    # property 8: the stage and its approvals read before the approvals insert: two approvals that
    # each read the first stage one short both advance the stage, and the second stage is skipped
    Fault("CHECK_THEN_INSERT", _RULES, "assertion violated (spec_stages_done[op]==2)"),
    # property 8: the author's approval (row (1, AUTHOR1): vote[6]) completes the first stage
    Fault("AUTHOR_COUNTS", _RULES, "assertion violated (spec_stages_done[op]==2)", replay_shows="vote[6] = 1"),
    # property 3: the expiry listed an open review and ends it after its last approval recorded APPROVED
    Fault("NO_EXPIRY_RECHECK", _RULES, "assertion violated ((first_decision[1]==0)&&(acked_decision[1]==0))"),
)


def _tools() -> None:
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"{' and '.join(missing)} not installed (apt-get install spin gcc)"
    if os.environ.get("DECISIONFLOW_REQUIRE_SPIN") == "1":
        pytest.fail(f"DECISIONFLOW_REQUIRE_SPIN=1 but {reason}")
    pytest.skip(reason)


def _number(pattern: str, output: str) -> int:
    match = re.search(pattern, output)
    assert match is not None, f"pan output lacks {pattern!r}:\n{output}"
    return int(match.group(1))


def _run(command: list[str], cwd: Path, *, check: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, check=check)


def _compile(workdir: Path, command: list[str]) -> None:
    """Build workdir/pan with command, or copy the verifier an earlier run built from the same sources (every
    file spin generated), command and compiler."""
    digest = hashlib.sha256(" ".join(command).encode())
    digest.update(_run(["gcc", "--version"], workdir, check=True).stdout.encode())
    for generated in sorted(workdir.glob("pan.*")):
        digest.update(generated.name.encode() + b"\0" + generated.read_bytes())
    cached = VERIFIERS / digest.hexdigest()
    if cached.exists():
        shutil.copy2(cached, workdir / "pan")
        return
    _run(command, workdir, check=True)
    VERIFIERS.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}")
    shutil.copy2(workdir / "pan", partial)
    partial.replace(cached)


def run_spin(workdir: Path, defines: tuple[str, ...], *, liveness: bool, optimise: str = "-O1") -> SpinRun:
    """Generate, compile and run the verifier for one configuration in workdir; return what pan reported."""
    _tools()
    model = workdir / MODEL.name
    shutil.copyfile(MODEL, model)
    flags = [f"-D{d}" for d in defines]
    _run(["spin", "-a", *flags, model.name], workdir, check=True)
    # COLLAPSE compresses the state vector; liveness needs the full search (no -DSAFETY) and
    # room in the fairness bookkeeping for every process (NFAIR).
    cflags = ["-DCOLLAPSE", "-DNFAIR=3"] if liveness else ["-DSAFETY", "-DCOLLAPSE"]
    # Compiling pan.c costs more than searching the CI bounds: -O1 (or -O0 for a search that stops
    # at its first error) keeps the whole check short; the deep bounds use -O2.
    _compile(workdir, ["gcc", optimise, *cflags, "-o", "pan", "pan.c"])
    search = ["-a", "-f"] if liveness else []
    pan = _run(["./pan", f"-m{SEARCH_DEPTH}", *search], workdir, check=False)
    output: str = pan.stdout + pan.stderr
    assert "max search depth too small" not in output, output
    trail = workdir / f"{model.name}.trail"
    return SpinRun(
        output=output,
        errors=_number(r"errors: (\d+)", output),
        states=_number(r"(\d+) states, stored", output),
        depth=_number(r"depth reached (\d+)", output),
        trail=trail if trail.exists() else None,
    )


def _check_passes(bounds: Bounds, tmp_path: Path, optimise: str) -> None:
    result = run_spin(tmp_path, bounds.defines, liveness=bounds.liveness, optimise=optimise)
    print(f"{bounds.name} {' '.join(bounds.defines)}: {result.summary()}")
    assert result.errors == 0, result.output
    assert result.trail is None
    if bounds.liveness:
        assert "never claim         \t+ (settles)" in result.output, result.output
        assert "acceptance   cycles \t+ (fairness enabled)" in result.output, result.output
    else:
        assert "assertion violations\t+" in result.output, result.output
        assert "invalid end states\t+" in result.output, result.output


@pytest.mark.parametrize("bounds", CI_BOUNDS, ids=lambda b: b.name)
def test_model_holds_under_ci_bounds(bounds: Bounds, tmp_path: Path) -> None:
    """Every property holds in every state the CI bounds reach."""
    _check_passes(bounds, tmp_path, "-O1")


@pytest.mark.campaign
@pytest.mark.parametrize("bounds", DEEP_BOUNDS, ids=lambda b: b.name)
def test_model_holds_under_deep_bounds(bounds: Bounds, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every property holds under the larger bounds (run with --model-depth deep)."""
    if request.config.getoption("--model-depth") != "deep":
        pytest.skip("deep model bounds run with --model-depth deep")
    _check_passes(bounds, tmp_path, "-O2")


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.switch)
def test_each_seeded_fault_fails_its_property(fault: Fault, tmp_path: Path) -> None:
    """Removing one guard makes spin report the violation of the property it protects, with a trail."""
    result = run_spin(tmp_path, (fault.switch, *fault.bounds), liveness=fault.liveness, optimise="-O0")
    print(f"{fault.switch}: {result.summary()}")
    assert result.errors >= 1, result.output
    assert f"pan:1: {fault.violation}" in result.output, result.output
    assert result.trail is not None, "spin wrote no counterexample trail"
    flags = [f"-D{d}" for d in (fault.switch, *fault.bounds)]
    replay = _run(["spin", "-t", "-g", *flags, MODEL.name], tmp_path, check=False)
    replayed = replay.stdout + replay.stderr
    # The trail replays to the same end: the violated assertion, or the start of the accepting cycle.
    expected = "<<<<<START OF CYCLE>>>>>" if fault.liveness else "Error: assertion violated"
    assert expected in replayed, replayed
    if fault.replay_shows is not None:
        assert re.search(rf"^\s+{re.escape(fault.replay_shows)}$", replayed, re.MULTILINE), replayed
