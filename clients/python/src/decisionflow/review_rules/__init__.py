"""Review rules: who must approve an action, in which stages, by when (docs/review-rules.md).

Everything here is pure (no database, no clock, no network), so the orchestrator deciding a vote
and an auditor replaying the log offline reach the same answer from the same record:

- the model: ``Stage``, ``ReviewRule``, ``RuleSet`` (``rule_for(action)``), ``default_rule(action)``
  (one stage, any reviewer, one approval, one decline ends it: the behaviour without a file);
- the canonical bytes: ``encode_rule``/``decode_rule``, ``rule_digest`` (``rule-v1-`` + SHA-256 hex),
  and ``rule_fields``/``rule_from_fields`` for a record that carries a rule's fields after its own;
- evaluation: ``review_progress(record, now)`` says where a ``ReviewRecord`` stands (stage, who
  approved, how many are needed, who may vote now and why not, due, escalated, deadline);
  ``vote_effect(record, vote)`` says what one more vote does (``VoteOutcome.COMPLETES`` is the
  vote that calls the receiver);
- the file: ``load_rules(path)``/``parse_rules(text, file)``, refusing with ``RulesFileError``
  whose message lists every problem as ``FILE:LINE: message``;
- durations as the file writes them: ``parse_duration``, ``format_duration``.

The error tree is in ``decisionflow.review_rules._errors``.
"""

from decisionflow.review_rules._durations import format_duration, parse_duration
from decisionflow.review_rules._encoding import (
    RULE_DOMAIN,
    RULE_PREFIX,
    decode_rule,
    encode_rule,
    rule_digest,
    rule_fields,
    rule_from_fields,
)
from decisionflow.review_rules._errors import (
    FileProblem,
    InconsistentReview,
    InvalidRule,
    MalformedRule,
    ReviewRuleError,
    RuleProblem,
    RulesFileError,
)
from decisionflow.review_rules._file import FILE_VERSION, load_rules, parse_rules
from decisionflow.review_rules._lines import KeyLines
from decisionflow.review_rules._model import (
    DEFAULT_STAGE_NAME,
    GROUP_PATTERN,
    MAX_COUNT,
    MAX_DURATION,
    MAX_GROUPS,
    MAX_STAGES,
    NAME_PATTERN,
    ReviewRule,
    RuleSet,
    Stage,
    default_rule,
    rule_problems,
    stage_problems,
)
from decisionflow.review_rules._progress import ReviewProgress, StageTally, VoteEffect, review_progress, vote_effect
from decisionflow.review_rules._record import (
    Escalation,
    ReviewRecord,
    ReviewStatus,
    Vote,
    VoteOutcome,
    VoteRefusal,
)

__all__ = [
    "DEFAULT_STAGE_NAME",
    "FILE_VERSION",
    "GROUP_PATTERN",
    "MAX_COUNT",
    "MAX_DURATION",
    "MAX_GROUPS",
    "MAX_STAGES",
    "NAME_PATTERN",
    "RULE_DOMAIN",
    "RULE_PREFIX",
    "Escalation",
    "FileProblem",
    "InconsistentReview",
    "InvalidRule",
    "KeyLines",
    "MalformedRule",
    "ReviewProgress",
    "ReviewRecord",
    "ReviewRule",
    "ReviewRuleError",
    "ReviewStatus",
    "RuleProblem",
    "RuleSet",
    "RulesFileError",
    "Stage",
    "StageTally",
    "Vote",
    "VoteEffect",
    "VoteOutcome",
    "VoteRefusal",
    "decode_rule",
    "default_rule",
    "encode_rule",
    "format_duration",
    "load_rules",
    "parse_duration",
    "parse_rules",
    "review_progress",
    "rule_digest",
    "rule_fields",
    "rule_from_fields",
    "rule_problems",
    "stage_problems",
    "vote_effect",
]
