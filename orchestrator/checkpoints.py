"""Workflow checkpoints in the orchestrator's database, sealed with an HMAC.

The framework pickles checkpoint state, and unpickling runs code. Every stored checkpoint
is therefore sealed with HMAC-SHA256 over its id, workflow, graph signature, operation id
and state, and verified *before* anything is decoded: a tampered, swapped or foreign row
is refused with ``CheckpointIntegrity`` and never unpickled. A row whose columns do not
even hold their types (a non-ASCII MAC, state stored as text) is refused the same way.

The seal is one lock; the decoder is the other. Even a correctly sealed state is decoded by
``CheckpointUnpickler``, which resolves only the classes the framework's checkpoints of
this workflow really contain (listed in ``CHECKPOINT_CLASSES``): a sealed pickle that names
anything else (``os.system``, ``builtins.exec``, ``subprocess.Popen``...) is refused before
any of it is called, so a stolen checkpoint key alone does not run code in the orchestrator.

Python versions spell an enum member differently in a pickle: 3.11.7 and 3.12+ write
``Class(value)``, while 3.11.0-3.11.4 (Debian 12's ``python3`` is 3.11.2) write
``builtins.getattr(Class, "NAME")``. Both decode, on every version, so replicas on different
patch releases read each other's checkpoints; ``getattr`` itself is never handed out: the
pickle gets ``_enum_member``, which answers only a member, by name, of an admitted enum class.

Saves made while a review is opened are collected by ``RunCheckpoints`` and the one the
pending review resumes from is written in the same transaction as the request's own rows
(the proposal and its pending review), so a checkpoint write that fails fails the request and
nothing is half-recorded, and one request costs one durable write instead of one per
superstep. The run's earlier checkpoints are superseded by that one and never written. A
resume keeps none of its checkpoints: its run ends in the decision's transaction or in
nothing, and a decided operation is never resumed (a repeated Approve replays the recorded
decision).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import pickle  # decodes through CheckpointUnpickler only, after the HMAC check
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from decisionflow.vocabulary import OperationId
from orchestrator.domain import SealedCheckpoint
from orchestrator.errors import CheckpointIntegrity, WorkflowProtocolError

_MAC_DOMAIN = b"decisionflow.checkpoint.v1"
MIN_KEY_BYTES = 32


# Every global a checkpoint of the review workflow contains, found by decoding the checkpoints
# of real runs (StartReview, then Approve or decline); the builtin values in between (str,
# dict, list, tuple, None...) are pickle opcodes, not globals. A framework upgrade that adds a
# type to its checkpoints shows up as CHECKPOINT_INTEGRITY in the tests before a release.
CHECKPOINT_CLASSES: frozenset[tuple[str, str]] = frozenset(
    {
        ("agent_framework._workflows._checkpoint", "WorkflowCheckpoint"),
        ("agent_framework._workflows._events", "WorkflowEvent"),
        ("agent_framework._workflows._events", "WorkflowEventSource"),
        ("agent_framework._workflows._runner_context", "MessageType"),
        ("agent_framework._workflows._runner_context", "WorkflowMessage"),
        ("orchestrator.workflow", "ReviewTask"),
        ("orchestrator.workflow", "ReviewRequest"),
        ("orchestrator.workflow", "ReviewAnswer"),
    }
)


class ForbiddenGlobal(pickle.UnpicklingError):
    """A checkpoint's pickle named a global outside ``CHECKPOINT_CLASSES``; nothing of it ran."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"names {module}.{name}, which a checkpoint never contains")


# How Python 3.11.0-3.11.4 pickle an enum member: a call of this global with (Class, "NAME").
_ENUM_BY_NAME = ("builtins", "getattr")


def _enum_member(enum_class: object, name: object, /) -> Enum:
    """Stand in for ``getattr`` in a pickle: only a member, by name, of an admitted enum class."""
    if not (
        isinstance(enum_class, type)
        and issubclass(enum_class, Enum)
        and (enum_class.__module__, enum_class.__qualname__) in CHECKPOINT_CLASSES
        and isinstance(name, str)
        and name in enum_class.__members__
    ):
        raise ForbiddenGlobal(*_ENUM_BY_NAME)
    return enum_class[name]


class CheckpointUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the classes in ``CHECKPOINT_CLASSES``.

    ``find_class`` is the only way a pickle reaches a callable, so refusing every other
    name there refuses ``__reduce__`` tricks before they are called. The one callable that is
    not a class, ``builtins.getattr``, resolves to ``_enum_member``.
    """

    def find_class(self, module: str, name: str, /) -> Any:
        """Resolve an allowed class (or the enum-by-name form); raise ``ForbiddenGlobal`` for anything else."""
        if (module, name) == _ENUM_BY_NAME:
            return _enum_member
        if (module, name) not in CHECKPOINT_CLASSES:
            raise ForbiddenGlobal(module, name)
        found = super().find_class(module, name)
        if not isinstance(found, type):
            raise ForbiddenGlobal(module, name)
        return found


def decode_state(sealed: SealedCheckpoint) -> Any:
    """Decode a checkpoint's state through ``CheckpointUnpickler``; refuse it with CheckpointIntegrity."""
    try:
        return CheckpointUnpickler(io.BytesIO(sealed.state)).load()
    except Exception as exc:  # any failure to decode is a refused checkpoint, never a crash
        raise CheckpointIntegrity(
            sealed.checkpoint_id, f"state cannot be decoded: {exc}", operation_id=sealed.operation_id
        ) from exc


def _columns_problem(sealed: SealedCheckpoint) -> str | None:
    """Say what is wrong with a row whose columns do not hold their types (None: they do)."""
    fields: dict[str, object] = {"mac": sealed.mac, "key_id": sealed.key_id, "state": sealed.state}
    for name in ("mac", "key_id"):
        value = fields[name]
        if not isinstance(value, str) or not value.isascii():
            return f"its {name} column is not ASCII text"
    if not isinstance(fields["state"], bytes):
        return "its state column does not hold bytes"
    return None


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"decisionflow.checkpoint-key-id\x00" + key).hexdigest()[:16]


def _lp(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


class CheckpointSealer:
    """Seals with the first key; verifies with any configured key, so keys can be rotated."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ValueError("at least one checkpoint key is required")
        for key in keys:
            if len(key) < MIN_KEY_BYTES:
                raise ValueError(f"checkpoint keys must be at least {MIN_KEY_BYTES} bytes")
        self._keys = {_key_id(key): key for key in keys}
        self._signing_id = _key_id(keys[0])

    def _mac(
        self, key: bytes, checkpoint_id: str, workflow_name: str, graph: str, op: OperationId, state: bytes
    ) -> str:
        message = _MAC_DOMAIN + b"".join(
            _lp(part) for part in (checkpoint_id.encode(), workflow_name.encode(), graph.encode(), op.encode(), state)
        )
        return hmac.new(key, message, hashlib.sha256).hexdigest()

    def seal(
        self,
        checkpoint_id: str,
        workflow_name: str,
        graph: str,
        operation_id: OperationId,
        state: bytes,
        now: datetime,
    ) -> SealedCheckpoint:
        """Return the checkpoint sealed under the signing key."""
        mac = self._mac(self._keys[self._signing_id], checkpoint_id, workflow_name, graph, operation_id, state)
        return SealedCheckpoint(checkpoint_id, workflow_name, graph, operation_id, now, self._signing_id, mac, state)

    def open(self, sealed: SealedCheckpoint) -> Any:
        """Verify the seal, then (and only then) decode and return the state."""
        self.verify(sealed)
        return decode_state(sealed)

    def verify(self, sealed: SealedCheckpoint) -> None:
        """Check the seal under the configured keys without decoding; raise CheckpointIntegrity if it fails."""
        problem = _columns_problem(sealed)
        if problem is not None:
            raise CheckpointIntegrity(sealed.checkpoint_id, problem, operation_id=sealed.operation_id)
        key = self._keys.get(sealed.key_id)
        if key is None:
            raise CheckpointIntegrity(
                sealed.checkpoint_id, f"sealed under unknown key {sealed.key_id}", operation_id=sealed.operation_id
            )
        expected = self._mac(
            key,
            sealed.checkpoint_id,
            sealed.workflow_name,
            sealed.graph_signature,
            sealed.operation_id,
            sealed.state,
        )
        if not hmac.compare_digest(expected, sealed.mac):
            raise CheckpointIntegrity(
                sealed.checkpoint_id, "HMAC does not match; the row was altered", operation_id=sealed.operation_id
            )


class CheckpointSource(Protocol):
    """Where a run reads checkpoints saved by earlier requests (the store's checkpoint table)."""

    def get(self, checkpoint_id: str) -> SealedCheckpoint | None:
        """Return the stored checkpoint with that id, still sealed."""
        ...


class RunCheckpoints:
    """The framework's CheckpointStorage for one request on one operation.

    Saves are sealed at once and kept in memory until the service writes the one its pending
    review resumes from with its own rows (``take_pending``); loads of earlier checkpoints come
    from the table and are verified before they are decoded. A storage made with
    ``keep=False`` (a resume) acknowledges saves and keeps nothing.
    """

    def __init__(
        self,
        table: CheckpointSource,
        sealer: CheckpointSealer,
        operation_id: OperationId,
        clock: Callable[[], datetime],
        before_save: Callable[[], None] = lambda: None,
        *,
        keep: bool = True,
    ) -> None:
        self._table = table
        self._sealer = sealer
        self._operation_id = operation_id
        self._clock = clock
        self._before_save = before_save
        self._pending: list[SealedCheckpoint] = []
        self._keeping = keep
        self._verified: dict[str, Any] = {}
        self.save_error: BaseException | None = None

    def take_pending(self, checkpoint_id: str) -> list[SealedCheckpoint]:
        """Hand over, for the caller's transaction, the saved checkpoint a pending review resumes from
        (checkpoint_id); the run's other saves are superseded by it and dropped."""
        pending, self._pending = self._pending, []
        kept = [sealed for sealed in pending if sealed.checkpoint_id == checkpoint_id]
        if not kept:
            raise WorkflowProtocolError(f"the run on {self._operation_id} never saved checkpoint {checkpoint_id}")
        return kept

    def load_verified(self, checkpoint_id: str) -> Any:
        """Return the checkpoint with that id after verifying its seal (NotFound → None)."""
        if checkpoint_id in self._verified:
            return self._verified[checkpoint_id]
        for sealed in self._pending:
            if sealed.checkpoint_id == checkpoint_id:
                return decode_state(sealed)
        return self.admit(self._table.get(checkpoint_id))

    def admit(self, stored: SealedCheckpoint | None) -> Any:
        """Verify a checkpoint row read by the caller and keep it for the framework's load (None → None)."""
        if stored is None:
            return None
        if stored.operation_id != self._operation_id:
            raise CheckpointIntegrity(
                stored.checkpoint_id,
                f"belongs to another operation ({stored.operation_id})",
                operation_id=self._operation_id,
            )
        checkpoint = self._sealer.open(stored)
        self._verified[stored.checkpoint_id] = checkpoint
        return checkpoint

    # The CheckpointStorage protocol of agent_framework.

    async def save(self, checkpoint: Any) -> str:
        """Seal the checkpoint and keep it for the request's transaction (keep=False: acknowledge only)."""
        try:
            self._before_save()
            if not self._keeping:
                return str(checkpoint.checkpoint_id)
            state = pickle.dumps(checkpoint, protocol=pickle.HIGHEST_PROTOCOL)
            sealed = self._sealer.seal(
                checkpoint.checkpoint_id,
                checkpoint.workflow_name,
                checkpoint.graph_signature_hash,
                self._operation_id,
                state,
                self._clock(),
            )
        except BaseException as exc:
            # The framework only logs a failed save; remember it so the request fails.
            self.save_error = exc
            raise
        self._pending.append(sealed)
        return str(checkpoint.checkpoint_id)

    async def load(self, checkpoint_id: str) -> Any:
        """Return a verified copy of the checkpoint, or None (the framework reports it as missing)."""
        return self.load_verified(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        """Return this run's unsaved checkpoints of the workflow."""
        return [decode_state(s) for s in self._pending if s.workflow_name == workflow_name]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        """Return the ids of this run's unsaved checkpoints of the workflow."""
        return [s.checkpoint_id for s in self._pending if s.workflow_name == workflow_name]

    async def get_latest(self, *, workflow_name: str) -> Any:
        """Return this run's newest unsaved checkpoint of the workflow, if any."""
        for sealed in reversed(self._pending):
            if sealed.workflow_name == workflow_name:
                return decode_state(sealed)
        return None

    async def delete(self, checkpoint_id: str) -> bool:
        """Checkpoints are deleted only by pruning; the framework cannot delete them."""
        return False
