"""A recorded history of client calls, and the checker that holds it against the receiver's effects.

Every campaign call is written as JSON lines: an ``invoke`` when it is sent, then exactly one
completion: ``ok`` (the server answered with an outcome the client can rely on), ``fail`` (a
definite refusal: nothing was written by this call) or ``info`` (indeterminate: a lost reply, a
deadline, a crash, or the outcome Unknown). Afterwards ``check`` compares the history with what
the receiver stored (ListEffects), what it answers (Lookup) and what the orchestrator recorded:

- at most one effect per operation id, and none for an operation nobody approved;
- an approval answered COMMITTED → exactly one effect, with the receipt the client was told;
- a decline answered DECLINED, or a conflict naming DECLINE → no effect;
- an approval that was only ever refused → no effect;
- an approval left indeterminate → zero or one effect, and Lookup agrees with ListEffects;
- every decision a client was told (an outcome, or the decision a conflict named) is the one
  recorded, and no two clients were told different decisions for one operation.

Calls are judged per operation, not one by one: a refused approval says nothing about a
concurrent approval of the same operation that succeeded.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from decisionflow.client import (
    ApproveResult,
    Decision,
    DecisionConflict,
    DecisionflowError,
    EffectRecord,
    LookupAnswer,
    LookupStatus,
    Outcome,
)

EventType = Literal["invoke", "ok", "fail", "info"]
DECISION_CALLS = ("approve", "decline")


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the history."""

    type: EventType
    process: str
    call: str
    op: str
    case: str
    time: float
    outcome: str = ""
    decision: str = ""  # the decision the client was told is recorded (outcome, or the conflict's)
    receipt: str = ""
    replay: bool = False
    error: str = ""


class History:
    """Appends events to a JSONL file; safe to use from many threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._file = path.open("a", encoding="utf-8")

    def close(self) -> None:
        """Flush and close the file."""
        with self._lock:
            self._file.close()

    def record(self, event: Event) -> None:
        """Append one event."""
        line = json.dumps(asdict(event), sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def now(self) -> float:
        """Seconds since the history began."""
        return round(time.monotonic() - self._started, 6)

    @contextmanager
    def call(self, process: str, call: str, op: str, case: str) -> Iterator[Completion]:
        """Record the invocation, run the body, then record its completion (info if the body raised)."""
        self.record(Event("invoke", process, call, op, case, self.now()))
        completion = Completion(self, process, call, op, case)
        try:
            yield completion
        except DecisionflowError as error:
            completion.error(error)
            raise
        finally:
            if not completion.done:
                completion.finish("info", error="the call ended without a recorded answer")


@dataclass
class Completion:
    """The completion of one invoked call; exactly one of its methods is called."""

    history: History
    process: str
    call: str
    op: str
    case: str
    done: bool = False

    def finish(self, kind: EventType, **fields: str | bool) -> None:
        """Record the completion once."""
        if self.done:
            return
        self.done = True
        event = Event(kind, self.process, self.call, self.op, self.case, self.history.now())
        self.history.record(Event(**{**asdict(event), **fields}))

    def answered(self, result: ApproveResult) -> None:
        """Record a decision's answer: UNKNOWN is indeterminate, the other outcomes are relied on."""
        # An answer, unlike a conflict, tells the client that its own decision is the recorded one, and
        # the operation it carries says so again: what the client reads is that operation's decision.
        decision = "APPROVE" if self.call == "approve" else "DECLINE"
        answered = result.operation
        if answered.operation_id != self.op:
            decision = f"another operation's ({answered.operation_id})"
        elif answered.decision is not Decision.UNSPECIFIED:
            decision = answered.decision.value
        kind: EventType = "info" if result.outcome is Outcome.UNKNOWN else "ok"
        if result.outcome is Outcome.REJECTED:
            kind = "fail"  # the receiver definitely refused: this call wrote nothing
        self.finish(
            kind,
            outcome=result.outcome.value,
            decision=decision,
            receipt=result.operation.receipt_id or "",
            replay=result.replay,
        )

    def error(self, error: DecisionflowError) -> None:
        """Record a typed client error: definite → fail, otherwise info."""
        decision = error.recorded_decision.value if isinstance(error, DecisionConflict) else ""
        self.finish(
            "fail" if error.definite else "info",
            outcome=error.reason or error.code.name,
            decision="" if decision == Decision.UNSPECIFIED.value else decision,
            error=str(error)[:300],
        )


def load(path: Path) -> list[Event]:
    """Read a history file."""
    with path.open(encoding="utf-8") as lines:
        return [Event(**json.loads(line)) for line in lines if line.strip()]


@dataclass
class CheckResult:
    """What the checker found: violations (empty when the history holds) and tallies for the report."""

    operations: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    decisions_lost: int = 0
    decisions_changed: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        """True when no violation was found."""
        return not self.violations

    def explain(self, limit: int = 20) -> str:
        """The first violations, one per line."""
        more = len(self.violations) - limit
        return "\n".join(self.violations[:limit] + ([f"... and {more} more"] if more > 0 else []))


@dataclass
class _Operation:
    case: str = ""
    ok_approvals: list[Event] = field(default_factory=list)
    info_approvals: int = 0
    failed_approvals: int = 0
    told: set[str] = field(default_factory=set)


# The outcomes an answer to each call may carry; anything else answers another decision.
FITTING_OUTCOMES = {"approve": {"COMMITTED", "UNKNOWN", "REJECTED"}, "decline": {"DECLINED"}}


def _operations(events: Iterable[Event], result: CheckResult) -> dict[str, _Operation]:
    ops: dict[str, _Operation] = defaultdict(_Operation)
    for event in events:
        if not event.op:
            continue
        op = ops[event.op]
        op.case = op.case or event.case
        if event.type == "invoke" or event.call not in DECISION_CALLS:
            continue
        answered = event.outcome in FITTING_OUTCOMES["approve"] | FITTING_OUTCOMES["decline"]
        if answered and event.outcome not in FITTING_OUTCOMES[event.call]:
            result.violations.append(f"{event.op}: a {event.call} was answered {event.outcome}")
        if event.decision:
            op.told.add(event.decision)
        if event.call != "approve":
            continue
        if event.type == "ok":
            op.ok_approvals.append(event)
        elif event.type == "info":
            op.info_approvals += 1
        else:
            op.failed_approvals += 1
    return ops


def _check_effects(op_id: str, op: _Operation, effects: Sequence[EffectRecord], result: CheckResult) -> None:
    n = len(effects)
    if n > 1:
        result.duplicates += n - 1
        result.violations.append(f"{op_id}: {n} effects for one operation id")
    if op.ok_approvals:
        if n != 1:
            result.violations.append(f"{op_id}: approval answered COMMITTED but {n} effects")
        told = {e.receipt for e in op.ok_approvals}
        if n >= 1 and told != {effects[0].receipt.receipt_id}:
            result.violations.append(
                f"{op_id}: clients were told receipts {sorted(told)}, the effect has {effects[0].receipt.receipt_id}"
            )
    elif Decision.DECLINE.value in op.told:
        if n:
            result.violations.append(f"{op_id}: declined (as clients were told) but {n} effects")
    elif op.info_approvals:
        pass  # zero or one; Lookup must agree (checked for every operation below)
    elif n:
        what = "only refused approvals" if op.failed_approvals else "no approval"
        result.violations.append(f"{op_id}: {what}, yet {n} effects")


def _check_lookup(
    op_id: str, effects: Sequence[EffectRecord], answer: LookupAnswer | None, result: CheckResult
) -> None:
    if answer is None:
        result.violations.append(f"{op_id}: no Lookup answer")
        return
    applied = answer.status is LookupStatus.APPLIED
    if applied != bool(effects):
        result.violations.append(f"{op_id}: Lookup says {answer.status.value}, ListEffects has {len(effects)}")
    elif applied and (answer.receipt is None or answer.receipt.receipt_id != effects[0].receipt.receipt_id):
        result.violations.append(f"{op_id}: Lookup's receipt differs from the stored effect's")


def _check_decision(op_id: str, op: _Operation, recorded: Decision | None, result: CheckResult) -> None:
    if len(op.told) > 1:
        result.decisions_changed += 1
        result.violations.append(f"{op_id}: clients were told different decisions {sorted(op.told)}")
        return
    if not op.told:
        return
    (told,) = op.told
    if recorded is None or recorded is Decision.UNSPECIFIED:
        result.decisions_lost += 1
        result.violations.append(f"{op_id}: a client was told {told}, but no decision is recorded")
    elif recorded.value != told:
        result.decisions_changed += 1
        result.violations.append(f"{op_id}: a client was told {told}, but {recorded.value} is recorded")


def check(
    events: Iterable[Event],
    effects: Iterable[EffectRecord],
    lookups: Mapping[str, LookupAnswer],
    decisions: Mapping[str, Decision] | None = None,
) -> CheckResult:
    """Check a history against the effects of its cases, Lookup answers and (if given) recorded decisions.

    effects must be every effect stored for the history's cases; decisions maps operation ids to
    the decision the orchestrator recorded (an id absent from it has none).
    """
    events = list(events)
    result = CheckResult()
    for event in events:
        if event.type != "invoke":
            result.calls[event.type] = result.calls.get(event.type, 0) + 1
    ops = _operations(events, result)
    by_op: dict[str, list[EffectRecord]] = defaultdict(list)
    for effect in effects:
        by_op[effect.operation_id].append(effect)
    for op_id in sorted(set(by_op) - set(ops)):
        result.violations.append(f"{op_id}: an effect for an operation no client ever named")
    result.operations = len(ops)
    for op_id, op in sorted(ops.items()):
        _check_effects(op_id, op, by_op.get(op_id, []), result)
        _check_lookup(op_id, by_op.get(op_id, []), lookups.get(op_id), result)
        if decisions is not None:
            _check_decision(op_id, op, decisions.get(op_id), result)
    return result
