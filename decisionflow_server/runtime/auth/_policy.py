"""Which roles may call which RPC, derived rules such as four-eyes, and the check that the policy
names every RPC of the contract."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from decisionflow.v1 import audit_pb2, common_pb2, effect_receiver_pb2, events_pb2, operations_pb2, review_pb2
from decisionflow_server.runtime.auth._errors import FourEyesViolation
from decisionflow_server.runtime.auth._roles import Role

_REVIEW = "/decisionflow.v1.ReviewService/"
_OPERATIONS = "/decisionflow.v1.OperationsService/"
_RECEIVER = "/decisionflow.v1.EffectReceiverService/"
_AUDIT = "/decisionflow.v1.AuditService/"
_EVENTS = "/decisionflow.v1.EventService/"

_READERS_OF_REVIEWS = frozenset({Role.REVIEWER, Role.AUTHOR, Role.OPERATOR})
# An auditor exports an operation's leaves together with the orchestrator's record of its decision
# (decisionflow audit export), so it reads operations too; it changes nothing anywhere.
_READERS_OF_OPERATIONS = _READERS_OF_REVIEWS | {Role.AUDITOR}
# The log is read by auditors, and by operators who answer for the service that writes it.
_READERS_OF_THE_LOG = frozenset({Role.AUDITOR, Role.OPERATOR})
# Every role the orchestrator serves: whoever holds one may ask who they are. A principal holding
# only receiver roles (the orchestrator's own effect_writer token) has no business here.
# The event feed: auditors and operators watch everything; an author watches the cases they proposed in
# (orchestrator.events checks which), so a service that started a review can wait for its outcome.
_WATCHERS = frozenset({Role.AUTHOR, Role.AUDITOR, Role.OPERATOR})
_ORCHESTRATOR_ROLES = frozenset({Role.REVIEWER, Role.AUTHOR, Role.OPERATOR, Role.AUDITOR})

RPC_ROLES: Mapping[str, frozenset[Role]] = MappingProxyType(
    {
        _REVIEW + "StartReview": frozenset({Role.AUTHOR}),
        _REVIEW + "EditProposal": frozenset({Role.AUTHOR}),
        _REVIEW + "GetProposal": _READERS_OF_REVIEWS,
        _REVIEW + "GetOperation": _READERS_OF_OPERATIONS,
        _REVIEW + "ListPendingReviews": _READERS_OF_REVIEWS,
        _REVIEW + "GetCaller": _ORCHESTRATOR_ROLES,
        _REVIEW + "Approve": frozenset({Role.REVIEWER}),
        _OPERATIONS + "ListOperations": frozenset({Role.OPERATOR}),
        _OPERATIONS + "SettleOperation": frozenset({Role.OPERATOR}),
        _OPERATIONS + "BatchSettleOperations": frozenset({Role.OPERATOR}),
        _OPERATIONS + "RedriveOperation": frozenset({Role.OPERATOR}),
        _RECEIVER + "Apply": frozenset({Role.EFFECT_WRITER}),
        # Operators read effects through the effect_reader role in their credentials entry, so
        # that the receiver's policy names a single reading role.
        _RECEIVER + "Lookup": frozenset({Role.EFFECT_READER}),
        _RECEIVER + "BatchLookup": frozenset({Role.EFFECT_READER}),
        _RECEIVER + "ListEffects": frozenset({Role.EFFECT_READER}),
        _AUDIT + "GetCheckpoint": _READERS_OF_THE_LOG,
        _AUDIT + "GetInclusionProof": _READERS_OF_THE_LOG,
        _AUDIT + "GetConsistencyProof": _READERS_OF_THE_LOG,
        _AUDIT + "ListLeaves": _READERS_OF_THE_LOG,
        _EVENTS + "WatchEvents": _WATCHERS,
    }
)

_CONTRACT_MODULES = (common_pb2, review_pb2, operations_pb2, effect_receiver_pb2, audit_pb2, events_pb2)


def all_rpc_methods() -> list[str]:
    """Return the full method name (``/package.Service/Method``) of every RPC in the contract."""
    methods: list[str] = []
    for module in _CONTRACT_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            methods.extend(f"/{service.full_name}/{method.name}" for method in service.methods)
    return sorted(methods)


def policy_gaps(policy: Mapping[str, frozenset[Role]]) -> tuple[list[str], list[str]]:
    """Return (RPCs the policy does not name, names in the policy that are not RPCs)."""
    methods = set(all_rpc_methods())
    return sorted(methods - set(policy)), sorted(set(policy) - methods)


def check_four_eyes(authors: Collection[str], reviewer: str, enabled: bool) -> None:
    """Raise FourEyesViolation when the rule is enabled and the reviewer is among the proposal's authors.

    The authors are everyone in the proposal's chain of edits and replacements: its creator and
    the creator of every proposal it was edited from or replaced, back to the first. Otherwise an
    author could have a colleague change one character, or restart the case with their text, and
    then approve their own text.
    """
    if enabled and reviewer in authors:
        raise FourEyesViolation(reviewer)
