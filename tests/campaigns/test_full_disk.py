"""A full disk under load: the receiver's and the orchestrator's SQLite files each on an 8 MiB tmpfs.

Reviews are started, then approvals run while a ballast file fills the receiver's filesystem
(Apply cannot write: the orchestrator answers Unknown), then the orchestrator's (StartReview
and Approve cannot write). Every refused write answers UNAVAILABLE naming the full disk, never
INTERNAL or UNKNOWN; reads (GetOperation, Lookup) keep answering. The ballast is deleted and,
without restarting anything, the next writes commit; one reconciler pass settles every Unknown;
the history holds and both databases pass ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from decisionflow.client import ApproveResult, Decision, DecisionflowError, Outcome, ReceiverClient, ReviewClient
from decisionflow.retry import NO_RETRY
from decisionflow_server.storage import db
from tests.campaigns.cluster import Cluster
from tests.campaigns.diskfull import SmallFilesystem, integrity, small_filesystems, truncate_wal
from tests.campaigns.history import History
from tests.campaigns.report import publish
from tests.campaigns.workload import Reviewer, channel, settle_and_check
from tests.support.campaigns import CampaignOptions
from tests.support.payloads import effect_request, new_operation_id

CONCURRENCY = 8
# The refusals a full disk may produce: retry later, with the same key.
FULL_DISK_CODES = {"UNAVAILABLE", "RESOURCE_EXHAUSTED"}
T = TypeVar("T")


@contextmanager
def _reviewers(target: str, history: History) -> Iterator[list[Reviewer]]:
    """Reviewers without client retries: a refused write shows as the server's own answer."""
    channels = [channel(target) for _ in range(CONCURRENCY)]
    try:
        yield [
            Reviewer(f"reviewer{i}", ReviewClient(ch, timeout=10, policy=NO_RETRY), history)
            for i, ch in enumerate(channels)
        ]
    finally:
        for ch in channels:
            ch.close()


def _parallel(reviewers: Sequence[Reviewer], work: Callable[[Reviewer, int], T], count: int) -> list[T]:
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        return list(pool.map(lambda i: work(reviewers[i % CONCURRENCY], i), range(count)))


def _start(reviewer: Reviewer, case: str) -> str | DecisionflowError:
    op = reviewer.start(case)
    if op is not None:
        return op
    assert reviewer.last_error is not None
    return reviewer.last_error


def _under_load(
    reviewers: Sequence[Reviewer],
    work: Callable[[Reviewer, int], T],
    count: int,
    fs: SmallFilesystem,
    database: Path,
) -> list[T]:
    """Run count calls on CONCURRENCY threads and fill fs (where database lies) while the first of
    them are in flight; database's write-ahead log is truncated first, so its writes need new space."""
    truncate_wal(database)
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        futures = [pool.submit(work, reviewers[i % CONCURRENCY], i) for i in range(count)]
        fs.fill()
        return [f.result() for f in futures]


def _refusal_problems(answers: Sequence[object]) -> list[str]:
    """Every error must be a retryable refusal that names the full disk."""
    problems = []
    for answer in answers:
        if isinstance(answer, DecisionflowError) and (
            answer.code.name not in FULL_DISK_CODES or db.STORAGE_FULL_MESSAGE not in str(answer)
        ):
            problems.append(f"{answer.code.name}: {answer}")
    return problems


def _direct_apply(receiver_target: str) -> tuple[str, str]:
    """Apply a fresh operation straight at the receiver (outside the history's cases); return its status
    name and message."""
    ch = channel(receiver_target)
    try:
        request = effect_request(new_operation_id(), "FULL-DIRECT")
        client = ReceiverClient(ch, timeout=10, policy=NO_RETRY)
        try:
            client.apply(request)
        except DecisionflowError as error:
            return error.code.name, str(error)
        return "OK", ""
    finally:
        ch.close()


@pytest.mark.campaign
@pytest.mark.slow
def test_full_disk_refuses_writes_clearly_keeps_reads_and_recovers(
    campaign: CampaignOptions, tmp_path: Path, history: History
) -> None:
    """A full disk refuses writes with UNAVAILABLE naming it, half-writes nothing, and heals without a restart."""
    n, seed = campaign.disk_ops, campaign.base_seed
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    started = time.monotonic()
    with small_filesystems(tmp_path / "mnt", "receiver", "orchestrator") as fs:
        receiver_db, orchestrator_db = fs["receiver"].path / "receiver.db", fs["orchestrator"].path / "orch.db"
        cluster = Cluster.create(workdir, f"sqlite:///{receiver_db}", f"sqlite:///{orchestrator_db}")
        try:
            cluster.start()
            target = cluster.orchestrators[0].target
            with _reviewers(target, history) as reviewers:
                ops = _parallel(reviewers, lambda r, i: _start(r, f"F{seed}-{i}"), 3 * n)
                assert all(isinstance(op, str) for op in ops), ops
                operation_ids = [str(op) for op in ops]

                def approve(first: int) -> Callable[[Reviewer, int], ApproveResult | DecisionflowError]:
                    def call(r: Reviewer, i: int) -> ApproveResult | DecisionflowError:
                        return r.decide(f"F{seed}-{first + i}", operation_ids[first + i], Decision.APPROVE)

                    return call

                receiver_full = _under_load(reviewers, approve(0), n, fs["receiver"], receiver_db)
                apply_code, apply_message = _direct_apply(cluster.receiver.target)
                receiver_reads = ReceiverClient(channel(cluster.receiver.target), timeout=10)
                lookup_while_full = receiver_reads.lookup(operation_ids[0]).status.value

                def approve_or_start(r: Reviewer, i: int) -> object:
                    if i % 2:
                        return _start(r, f"G{seed}-{i}")
                    return approve(n)(r, i // 2)

                orchestrator_full = _under_load(reviewers, approve_or_start, 2 * n, fs["orchestrator"], orchestrator_db)
                get_while_full = reviewers[0].client.get_operation(operation_ids[0]).state.value
                lookup_while_full_both = receiver_reads.lookup(operation_ids[0]).status.value

                fs["receiver"].free()
                fs["orchestrator"].free()
                # Space is back: the same processes take the remaining approvals, the refused ones again,
                # and the refused starts.
                refused_approvals = [
                    n + i // 2 for i, a in enumerate(orchestrator_full) if i % 2 == 0 and not _answered(a)
                ]
                refused_starts = [i for i, a in enumerate(orchestrator_full) if i % 2 and isinstance(a, Exception)]
                retried = [*range(2 * n, 3 * n), *refused_approvals]
                recovered = _parallel(
                    reviewers,
                    lambda r, i: r.decide(f"F{seed}-{retried[i]}", operation_ids[retried[i]], Decision.APPROVE),
                    len(retried),
                )
                restarted = _parallel(
                    reviewers, lambda r, i: _start(r, f"G{seed}-{refused_starts[i]}"), len(refused_starts)
                )
            settled = settle_and_check(cluster, history)
            checks = {"receiver": integrity(receiver_db), "orchestrator": integrity(orchestrator_db)}
        finally:
            cluster.close()

    outcomes = Counter(_label(a) for a in [*receiver_full, *orchestrator_full])
    figures = {
        "calls": 3 * n + 3 * n + len(retried) + len(refused_starts),
        "faults": 2,
        "refused_writes": sum(1 for a in [*receiver_full, *orchestrator_full] if isinstance(a, DecisionflowError)),
        "unknowns": outcomes.get("UNKNOWN", 0),
        "passes_to_settle": 1 if not settled.failures() else "unsettled",
        "violations": len(settled.result.violations) + len(settled.states),
        "duplicates_found": settled.result.duplicates,
        "apply_while_full": apply_code,
        "seconds": round(time.monotonic() - started, 1),
        **cluster.audit.figures(),
    }
    publish("full_disk", figures)
    assert not settled.failures(), "\n".join(settled.failures()[:30])
    assert not _refusal_problems([*receiver_full, *orchestrator_full]), _refusal_problems(orchestrator_full)
    # The receiver said why: a retryable refusal naming the full disk, not an internal error.
    assert apply_code in FULL_DISK_CODES and db.STORAGE_FULL_MESSAGE in apply_message, apply_message
    # Reads answered while the disks were full.
    assert lookup_while_full in {"APPLIED", "NOT_FOUND"} and lookup_while_full_both == lookup_while_full
    assert get_while_full in {"COMMITTED", "UNKNOWN"}
    # The full disks really refused something in each phase.
    assert any(not _answered(a) or _label(a) == "UNKNOWN" for a in receiver_full), outcomes
    assert any(isinstance(a, DecisionflowError) for a in orchestrator_full), outcomes
    # Recovery without a restart: every later write committed on the same processes.
    assert all(isinstance(a, ApproveResult) and a.outcome is Outcome.COMMITTED for a in recovered), recovered
    assert all(isinstance(op, str) for op in restarted), restarted
    assert [s.starts for s in cluster.servers()] == [1, 1]
    assert checks == {"receiver": ["ok"], "orchestrator": ["ok"]}


def _answered(answer: object) -> bool:
    return isinstance(answer, ApproveResult) and answer.outcome is not Outcome.UNKNOWN


def _label(answer: object) -> str:
    if isinstance(answer, ApproveResult):
        return answer.outcome.value
    if isinstance(answer, DecisionflowError):
        return answer.code.name
    return "started"
