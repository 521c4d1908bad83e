"""Identity computation for a 2 KB body, timed with timeit."""

from __future__ import annotations

import timeit

from bench import _workload
from decisionflow.identity import evidence_id, identities, operation_id, policy_id

_REPEAT = 5


def _per_call_us(statement: object, number: int) -> float:
    # The best of several repeats: the least disturbed by other work on the machine.
    best = min(timeit.repeat(statement, number=number, repeat=_REPEAT))  # type: ignore[arg-type]
    return best / number * 1e6


def measure(number: int = 20_000) -> tuple[float, float]:
    """Return µs per operation id (from the body and the evidence and policy ids) and µs for all three ids."""
    case_id = _workload.case_id("identity")
    body = _workload.body("identity")
    evidence, policy = _workload.EVIDENCE, _workload.POLICY
    ev, pol = evidence_id(evidence), policy_id(policy)
    assert len(body.encode()) == _workload.BODY_BYTES
    one = _per_call_us(lambda: operation_id(case_id, _workload.ACTION, body, ev, pol), number)
    every = _per_call_us(lambda: identities(case_id, _workload.ACTION, body, evidence, policy), number)
    return one, every
