"""The review rules in force: the rules file read at start-up and again on SIGHUP (docs/review-rules.md).

Without a file every action follows the default rule, which is the behaviour of a server that has
never heard of rules: any reviewer, one approval, one decline ends it. A file with a problem stops
the start, its ``FILE:LINE`` problems in the one error line (exit 2, as any setting that must
change); on SIGHUP the same file is read again, and a file with a problem keeps the rules in force
and logs why, as the credentials reload does. A review keeps the rule in force when it started.
"""

from __future__ import annotations

import logging
from pathlib import Path

from decisionflow.review_rules import ReviewRule, RuleSet, RulesFileError, load_rules
from decisionflow_server.foundation.startup_errors import configuration_error
from orchestrator.config import REVIEW_RULES_FILE

logger = logging.getLogger("decisionflow.orchestrator")


class RulesInForce:
    """The rule set a server decides by, swapped whole on reload (a reader sees the old set or the new)."""

    def __init__(self, path: Path | None = None, rules: RuleSet | None = None) -> None:
        self._path = path
        self._rules = RuleSet() if rules is None else rules

    @classmethod
    def at_start(cls, path: Path | None) -> RulesInForce:
        """Return the rules of the file at path (none: the default rule for every action); a file with a
        problem raises a configuration StartupError listing each problem as FILE:LINE."""
        if path is None:
            return cls()
        try:
            return cls(path, load_rules(path))
        except RulesFileError as error:
            raise configuration_error("cannot use the review rules file", (REVIEW_RULES_FILE,), str(error)) from error

    @property
    def rules(self) -> RuleSet:
        """The rule set in force now."""
        return self._rules

    def rule_for(self, action: str) -> ReviewRule:
        """Return the rule in force for action (the default rule when the file names no rule for it)."""
        return self._rules.rule_for(action)

    def reload(self) -> bool:
        """Read the file again and swap its rules in (True); without a file, or when the file has a problem,
        keep the rules in force (False, the problem logged)."""
        if self._path is None:
            return False
        try:
            rules = load_rules(self._path)
        except RulesFileError as error:
            # The message lists every problem as FILE:LINE: message.
            logger.error("review rules not reloaded, the previous ones stay in force: %s", error)
            return False
        self._rules = rules
        logger.info("review rules reloaded from %s: %d actions with their own rule", self._path, len(rules.rules))
        return True
