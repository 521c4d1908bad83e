"""The receiver's store against a plain model, on SQLite and PostgreSQL.

Hypothesis drives random Applies (new keys, repeats with the same payload, keys reused with
another), replays that may not write, lookups, batch lookups, listings paged per case, counts and
prunes of old keys across several cases. After every step each answer must equal the model's and a
fresh read; after every step every case's listing and every key's lookup must equal the model's.
Every statement the run executed is checked for a subquery column without its table, on both dialects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from decisionflow.vocabulary import ApplyResult, CaseId, OperationId, Receipt
from effect_receiver.domain import AppliedEffect, ApplyAnswer, Effect
from effect_receiver.errors import IdempotencyKeyReused
from effect_receiver.schema import metadata
from effect_receiver.store import EffectStore, migrate
from tests.support.databases import empty_tables, migrated_engine
from tests.support.sql_scopes import recording, unqualified_statements

T0 = datetime(2026, 12, 1, 9, 0, 0, 250000, tzinfo=UTC)
CASES = ("T-1", "T-2", "T-3")
KEYS = tuple(f"op-v1-{n:064x}" for n in range(1, 9))
REVIEWERS = ("rita@example.com", "ravi@example.com")


@dataclass
class ReceiverModel:
    """Effects by operation id, in the order they were written (the store's sequence)."""

    effects: dict[str, AppliedEffect] = field(default_factory=dict)

    def apply(self, effect: Effect, receipt: Receipt) -> ApplyAnswer:
        """A new key is created with receipt; a repeat replays the stored receipt; another payload is refused."""
        stored = self.effects.get(effect.operation_id)
        if stored is None:
            self.effects[effect.operation_id] = AppliedEffect(
                0, effect.operation_id, effect.case_id, effect.kind, effect.payload_digest, effect.body,
                effect.reviewer, receipt,
            )  # fmt: skip
            return ApplyAnswer(ApplyResult.CREATED, receipt)
        return self.replay(effect) or ApplyAnswer(ApplyResult.REPLAYED, stored.receipt)

    def replay(self, effect: Effect) -> ApplyAnswer | None:
        """The stored receipt of the key, None when absent, refused for another payload; never writes."""
        stored = self.effects.get(effect.operation_id)
        if stored is None:
            return None
        if stored.payload_digest != effect.payload_digest:
            raise IdempotencyKeyReused(effect.operation_id)
        return ApplyAnswer(ApplyResult.REPLAYED, stored.receipt)

    def listing(self, case_id: str) -> list[AppliedEffect]:
        """A case's effects, oldest first (sequence left out: the database numbers them)."""
        return [e for e in self.effects.values() if e.case_id == case_id]

    def prune(self, cutoff: datetime, limit: int) -> int:
        """The oldest (by write order) effects applied before cutoff, up to limit."""
        doomed = [op for op, e in self.effects.items() if applied_before(e, cutoff)][:limit]
        for op in doomed:
            del self.effects[op]
        return len(doomed)


def applied_before(effect: AppliedEffect, cutoff: datetime) -> bool:
    """Whether an effect was applied before cutoff (every effect here has its time)."""
    return effect.receipt.applied_at is not None and effect.receipt.applied_at < cutoff


def unsequenced(effects: tuple[AppliedEffect, ...] | list[AppliedEffect]) -> list[AppliedEffect]:
    """Effects with their sequence set to 0, to compare with the model's."""
    return [AppliedEffect(0, *(getattr(e, f) for f in AppliedEffect.__slots__[1:])) for e in effects]


class ReceiverStoreMachine(RuleBasedStateMachine):
    """Random Applies, replays, lookups, listings and prunes against the store and the model side by side."""

    store: EffectStore

    def __init__(self) -> None:
        super().__init__()
        empty_tables(self.store.engine, metadata)
        self.model = ReceiverModel()
        self.now = T0
        self.serial = 0

    def effect(self, key: str, case: str, variant: int, reviewer: str) -> Effect:
        payload = f'{{"operation_id":"{key}","variant":{variant}}}'.encode()
        return Effect(
            OperationId(key), CaseId(case), "support_review", payload, f"digest-{key[-4:]}-{variant}",
            f"Reply {variant} for {case}.", reviewer, self.now,
        )  # fmt: skip

    @rule(
        key=st.sampled_from(KEYS),
        case=st.sampled_from(CASES),
        variant=st.integers(0, 1),
        reviewer=st.sampled_from(REVIEWERS),
        age=st.integers(0, 30),
        wait=st.integers(0, 3),
    )
    def apply(self, key: str, case: str, variant: int, reviewer: str, age: int, wait: int) -> None:
        """Apply: a new key, a repeat (its first case and payload kept), or a key reused with another payload."""
        self.now += timedelta(seconds=wait)
        stored = self.model.effects.get(key)
        effect = self.effect(key, stored.case_id if stored else case, variant, reviewer)
        self.serial += 1
        receipt = Receipt(f"rcpt-{self.serial}", OperationId(key), self.now - timedelta(seconds=age))
        try:
            wanted = self.model.apply(effect, receipt)
        except IdempotencyKeyReused:
            with pytest.raises(IdempotencyKeyReused):
                self.store.apply(effect, receipt)
        else:
            assert self.store.apply(effect, receipt) == wanted
        assert self.store.lookup(OperationId(key)) == (stored or self.model.effects[key]).receipt

    @rule(key=st.sampled_from(KEYS), variant=st.integers(0, 1))
    def replay(self, key: str, variant: int) -> None:
        """A replay-only Apply answers the stored receipt, None when the key is absent, and writes nothing."""
        stored = self.model.effects.get(key)
        effect = self.effect(key, stored.case_id if stored else CASES[0], variant, REVIEWERS[0])
        try:
            wanted = self.model.replay(effect)
        except IdempotencyKeyReused:
            with pytest.raises(IdempotencyKeyReused):
                self.store.replay(effect)
        else:
            assert self.store.replay(effect) == wanted

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=6))
    def batch_lookup(self, keys: list[str]) -> None:
        """A batch lookup answers exactly the keys that have an effect, each with its own receipt."""
        wanted = {OperationId(k): self.model.effects[k].receipt for k in keys if k in self.model.effects}
        assert self.store.batch_lookup([OperationId(k) for k in keys]) == wanted

    @precondition(lambda self: bool(self.model.effects))
    @rule(back=st.integers(0, 40), limit=st.integers(1, 4), dry_run=st.booleans())
    def prune(self, back: int, limit: int, dry_run: bool) -> None:
        """Keys applied before a cutoff are pruned oldest first, limit at a time (or counted)."""
        cutoff = self.now - timedelta(seconds=back)
        if dry_run:
            expected = sum(applied_before(e, cutoff) for e in self.model.effects.values())
            assert self.store.count_keys_before(cutoff) == expected
        else:
            assert self.store.prune_keys_before(cutoff, limit=limit) == self.model.prune(cutoff, limit)

    @invariant()
    def every_case_and_key_matches(self) -> None:
        for case in CASES:
            pages: list[AppliedEffect] = []
            after, size = 0, 2
            while True:
                page = self.store.list_effects(CaseId(case), after=after, limit=size)
                pages += page.effects
                if page.next_after is None:
                    break
                assert page.next_after == page.effects[-1].sequence
                after = page.next_after
            sequences = [e.sequence for e in pages]
            assert sequences == sorted(set(sequences))
            assert unsequenced(pages) == self.model.listing(case)
        for key in KEYS:
            stored = self.model.effects.get(key)
            assert self.store.lookup(OperationId(key)) == (None if stored is None else stored.receipt)
        assert self.store.count_effects() == len(self.model.effects)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def receiver_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """A migrated receiver database of each kind."""
    yield from migrated_engine(request, tmp_path, "receiver", migrate)


@pytest.mark.slow
def test_the_receiver_store_answers_what_the_model_holds(
    receiver_engine: sa.Engine, request: pytest.FixtureRequest
) -> None:
    ReceiverStoreMachine.store = EffectStore(receiver_engine)
    with recording(receiver_engine) as recorder:
        run_state_machine_as_test(
            ReceiverStoreMachine,
            settings=settings(
                max_examples=request.config.getoption("--store-model-examples"),
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    assert len(recorder.statements) > 5  # Apply's, Lookup's, the listing's, the prune's: the check below saw them
    assert unqualified_statements(list(recorder.statements.values())) == []
