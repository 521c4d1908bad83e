"""AuditClient and AsyncAuditClient against a real orchestrator (authentication on) over an in-memory log,
and verify_operation: a caller proves its own operation against a checkpoint it opened itself, and
every way the answer could be wrong is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from decisionflow.channels import insecure_channel, open_aio_channel
from decisionflow.client import (
    AsyncAuditClient,
    AuditClient,
    BeyondCheckpoint,
    Decision,
    InclusionProofs,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    verify_operation,
)
from decisionflow.retry import NO_RETRY
from decisionflow.transparency import (
    Checkpoint,
    DecisionLeaf,
    EffectLeaf,
    HistoryError,
    InvalidTreeRange,
    NoteVerifier,
    NotProven,
    WrongRoot,
    open_checkpoint,
    verify_consistency,
)
from tests.support.audit_log import AT, ORIGIN, InMemoryAuditLog, sample_proposal
from tests.support.secure import SecureStack, start_secure_stack

A = sample_proposal("T-1", "Known issue; update to 4.2.1.")
B = sample_proposal("T-1", "Known issue; update to 4.2.2.")


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    """A log: 0 proposal A, 1 decision A (checkpoint 2), 2 proposal B, 3 effect A (checkpoint 4)."""
    log = InMemoryAuditLog()
    stack = start_secure_stack(tmp_path_factory.mktemp("audit-client"), audit_log=log)
    log.append(A)
    log.append(DecisionLeaf(AT, A.operation_id, "APPROVE", "rita"))
    log.sign()
    log.append(B)
    log.append(EffectLeaf(AT, A.operation_id, "r-1", AT))
    log.sign()
    try:
        yield stack
    finally:
        stack.close()


def _client(secure: SecureStack, principal: str | None = "audrey") -> AuditClient:
    metadata = () if principal is None else secure.as_(principal)
    return AuditClient(secure.channel(False), timeout=10, policy=NO_RETRY, metadata=metadata)


def _trusted(secure: SecureStack, proofs: InclusionProofs) -> Checkpoint:
    assert proofs.checkpoint is not None
    key = NoteVerifier.from_vkey(secure.stack.fake_audit_log().vkey)
    return open_checkpoint(proofs.checkpoint.signed_note, [key], origin=ORIGIN)


def test_a_caller_proves_its_operation_and_its_decision(secure: SecureStack) -> None:
    proofs = _client(secure).inclusion_proofs(operation_id=A.operation_id)

    logged = verify_operation(A.operation_id, proofs, _trusted(secure, proofs), decision=Decision.APPROVE)

    assert [proof.leaf.index for proof in proofs.proofs] == [0, 1, 3]
    assert logged.proposal == A
    assert logged.decision is not None and (logged.decision.decision, logged.decision.principal) == ("APPROVE", "rita")
    assert [effect.receipt_id for effect in logged.effects] == ["r-1"]
    with pytest.raises(NotProven, match="decision APPROVE"):
        verify_operation(A.operation_id, proofs, _trusted(secure, proofs), decision=Decision.DECLINE)


def test_verify_operation_refuses_every_answer_that_does_not_hold(secure: SecureStack) -> None:
    client = _client(secure)
    proofs = client.inclusion_proofs(operation_id=A.operation_id)
    checkpoint = _trusted(secure, proofs)
    first = client.inclusion_proofs(operation_id=A.operation_id, tree_size=2)
    edited = dataclasses.replace(proofs.proofs[1].leaf, data=proofs.proofs[1].leaf.data.replace(b"rita", b"ruth"))
    tampered = dataclasses.replace(
        proofs, proofs=(proofs.proofs[0], dataclasses.replace(proofs.proofs[1], leaf=edited), proofs.proofs[2])
    )
    decision_only = dataclasses.replace(proofs, proofs=proofs.proofs[1:2])
    other = client.inclusion_proofs(operation_id=B.operation_id)

    with pytest.raises(WrongRoot):
        verify_operation(A.operation_id, tampered, checkpoint)
    with pytest.raises(InvalidTreeRange):
        verify_operation(A.operation_id, first, checkpoint)  # proofs of the tree of 2, checkpoint of 4
    with pytest.raises(HistoryError) as no_proposal:
        verify_operation(A.operation_id, decision_only, checkpoint)
    assert no_proposal.value.index == 1
    with pytest.raises(HistoryError, match="names"):
        verify_operation(A.operation_id, other, checkpoint)
    with pytest.raises(NotProven):
        verify_operation(A.operation_id, dataclasses.replace(proofs, proofs=()), checkpoint)


def test_pages_of_a_case_and_of_the_leaves_are_gathered(secure: SecureStack) -> None:
    client = _client(secure, "olga")
    case = client.inclusion_proofs(case_id="T-1", page_size=1)
    leaves = list(client.list_leaves(4, page_size=3))
    consistency = client.consistency_proof(2)

    assert (case.tree_size, [proof.leaf.index for proof in case.proofs]) == (4, [0, 1, 2, 3])
    assert [(leaf.index, leaf.data) for leaf in leaves] == [
        (leaf.index, leaf.data) for leaf in secure.stack.fake_audit_log().leaves(0, 4)
    ]
    assert consistency.checkpoint is not None
    verify_consistency(2, 4, consistency.hashes, client.get_checkpoint(2).root_hash, consistency.checkpoint.root_hash)


def test_refusals_are_typed(secure: SecureStack) -> None:
    with pytest.raises(BeyondCheckpoint) as beyond:
        _client(secure).inclusion_proofs(leaf_index=4)
    assert beyond.value.checkpoint_size == 4 and beyond.value.definite
    with pytest.raises(NotFound):
        _client(secure).get_checkpoint(3)
    with pytest.raises(PermissionDenied):
        _client(secure, "rita").get_checkpoint()
    with pytest.raises(Unauthenticated):
        _client(secure, None).get_checkpoint()
    with pytest.raises(ValueError, match="exactly one"):
        _client(secure).inclusion_proofs(operation_id=A.operation_id, case_id="T-1")


def test_the_async_client_reads_what_the_sync_client_reads(secure: SecureStack) -> None:
    async def read() -> tuple[int, list[int], list[int], int]:
        channel = open_aio_channel(f"127.0.0.1:{secure.stack.orchestrator_port}")
        try:
            client = AsyncAuditClient(channel, timeout=10, policy=NO_RETRY, metadata=secure.as_("audrey"))
            checkpoint = await client.get_checkpoint()
            proofs = await client.inclusion_proofs(case_id="T-1", page_size=2)
            leaves = [leaf.index async for leaf in client.list_leaves(checkpoint.tree_size, page_size=1)]
            consistency = await client.consistency_proof(1)
            return checkpoint.tree_size, [p.leaf.index for p in proofs.proofs], leaves, consistency.new_size
        finally:
            await channel.close(None)

    assert asyncio.run(read()) == (4, [0, 1, 2, 3], [0, 1, 2, 3], 4)
    with insecure_channel(f"127.0.0.1:{secure.stack.orchestrator_port}") as channel:
        sync = AuditClient(channel, timeout=10, policy=NO_RETRY, metadata=secure.as_("audrey"))
        assert sync.get_checkpoint().tree_size == 4


def test_the_snippet_of_the_audit_log_page_runs(secure: SecureStack, capsys: pytest.CaptureFixture[str]) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "audit-log.md").read_text(encoding="utf-8")
    section = page.split("## The AuditService", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None
    target = f"127.0.0.1:{secure.stack.orchestrator_port}"
    snippet = found.group(1).replace('"orchestrator.example:50051", ca_file="ca.pem"', f'"{target}"')
    assert target in snippet
    namespace: dict[str, object] = {
        "log_vkey": secure.stack.fake_audit_log().vkey,
        "log_origin": ORIGIN,
        "token": secure.tokens["audrey"],
        "operation_id": A.operation_id,
    }

    exec(snippet, namespace)

    assert capsys.readouterr().out == f"{A.body} APPROVE\n"
