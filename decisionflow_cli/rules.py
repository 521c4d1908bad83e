"""``decisionflow rules check FILE``: refuse a review rules file with every problem at its line, or summarise
what it routes (docs/review-rules.md).

Problems and warnings go to standard error as ``FILE:LINE: ...``; the summary to standard output.
Exit 0 when the file holds (warnings included), 1 when it does not, 2 for bad usage or an unreadable
credentials file. A warning names what no error can: a group no token or certificate of the
credentials file holds (an OIDC claim may still carry it), or an action the orchestrator does not serve.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Set
from pathlib import Path

from decisionflow.review_rules import (
    KeyLines,
    ReviewRule,
    RuleSet,
    RulesFileError,
    Stage,
    default_rule,
    format_duration,
    load_rules,
)
from decisionflow_cli.command import CommandError, Subparsers
from decisionflow_server.foundation import strict_json
from orchestrator.domain import SUPPORTED_ACTIONS

EXIT_HOLDS = 0
EXIT_REFUSED = 1


def register(subparsers: Subparsers) -> None:
    """Add ``rules check``."""
    parser = subparsers.add_parser(
        "rules",
        help="check review rules files",
        description="Check the review rules file the orchestrator routes reviews by (docs/review-rules.md).",
    )
    commands = parser.add_subparsers(dest="rules_command", metavar="SUBCOMMAND", required=True)
    check = commands.add_parser(
        "check",
        help="list every problem of a rules file, or summarise its rules",
        description=(
            "Print every problem of the rules file as FILE:LINE: message and exit 1, or print its actions, "
            "stages and groups and exit 0. With --known-groups or --credentials, warn of a group nobody holds."
        ),
    )
    check.add_argument("file", metavar="FILE", help="the rules file (TOML)")
    holders = check.add_mutually_exclusive_group()
    holders.add_argument(
        "--known-groups",
        metavar="GROUPS",
        help="comma-separated groups the identity provider gives (warn of any other)",
    )
    holders.add_argument(
        "--credentials",
        metavar="FILE",
        help="the credentials file (JSON): warn of a group none of its tokens or certificates holds",
    )
    check.set_defaults(func=_run_check)


def _run_check(args: argparse.Namespace) -> int:
    known, source = _known_groups(args)
    try:
        rules = load_rules(args.file)
    except RulesFileError as refused:
        sys.stderr.write("".join(f"{problem}\n" for problem in refused.problems))
        return EXIT_REFUSED
    lines = KeyLines(Path(args.file).read_text(encoding="utf-8"))
    for where, warning in _warnings(rules, known, source):
        sys.stderr.write(f"{args.file}:{lines.line_of(where)}: warning: {warning}\n")
    sys.stdout.write("".join(line + "\n" for line in _summary(args.file, rules)))
    return EXIT_HOLDS


def _known_groups(args: argparse.Namespace) -> tuple[Set[str] | None, str]:
    if args.known_groups is not None:
        return {group.strip() for group in args.known_groups.split(",") if group.strip()}, "--known-groups"
    if args.credentials is None:
        return None, ""
    try:
        document = strict_json.loads(Path(args.credentials).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read {args.credentials!r}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommandError(f"{args.credentials!r} is not a JSON credentials file: {exc}") from exc
    return _credential_groups(document), args.credentials


def _credential_groups(document: object) -> set[str]:
    # Tokens and certificates carry groups as they carry roles; an entry without them holds none.
    groups: set[str] = set()
    if not isinstance(document, dict):
        return groups
    for kind in ("tokens", "certificates"):
        entries = document.get(kind)
        for entry in entries if isinstance(entries, list) else []:
            held = entry.get("groups") if isinstance(entry, dict) else None
            if isinstance(held, list):
                groups.update(group for group in held if isinstance(group, str))
    return groups


def _warnings(rules: RuleSet, known: Set[str] | None, source: str) -> Iterator[tuple[tuple[str | int, ...], str]]:
    for action in rules.rules:
        if action not in SUPPORTED_ACTIONS:
            served = ", ".join(sorted(SUPPORTED_ACTIONS))
            yield ("actions", action), f"the orchestrator serves no action {action!r} (it serves {served})"
    if known is None:
        return
    warned: set[str] = set()
    for action, rule in rules.rules.items():
        for index, stage in enumerate(rule.stages):
            for key, groups in (("groups", stage.groups), ("escalate_to", stage.escalate_to)):
                for group in sorted(set(groups) - known - warned):
                    warned.add(group)
                    holder = (
                        "is not among --known-groups"
                        if source == "--known-groups"
                        else f"is held by no token or certificate of {source} (an OIDC groups claim may still carry it)"
                    )
                    yield ("actions", action, "stages", index, key), f"group {group!r} {holder}"


def _summary(file: str, rules: RuleSet) -> list[str]:
    stages = sum(len(rule.stages) for rule in rules.rules.values())
    groups = sorted({group for rule in rules.rules.values() for group in rule.groups})
    lines = [f"{file}: {_count(len(rules.rules), 'action')}, {_count(stages, 'stage')}, {_count(len(groups), 'group')}"]
    for rule in rules.rules.values():
        lines.append(f"{rule.action}: {_rule_words(rule)}")
        lines += [f"  {index}. {_stage_words(stage)}" for index, stage in enumerate(rule.stages, start=1)]
    if groups:
        lines.append(f"groups: {', '.join(groups)}")
    default = default_rule("any")
    lines.append(f"any other action (the default rule): {_stage_words(default.stages[0])}; {_rule_words(default)}")
    return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _rule_words(rule: ReviewRule) -> str:
    words = [f"deadline {format_duration(rule.deadline)}" if rule.deadline else "no deadline"]
    if len(rule.stages) > 1:
        once = (
            "a principal counts in one stage only"
            if rule.distinct_across_stages
            else "a principal may count in several stages"
        )
        words.append(once)
    return "; ".join(words)


def _stage_words(stage: Stage) -> str:
    deciders = f"from {', '.join(stage.groups)}" if stage.groups else "from any reviewer"
    ends = "ends" if stage.declines_to_end == 1 else "end"
    words = [
        f"{_count(stage.approvals, 'approval')} {deciders}",
        f"{_count(stage.declines_to_end, 'decline')} {ends} the review",
    ]
    if stage.due is not None:
        then = f", then also from {', '.join(stage.escalate_to)}" if stage.escalate_to else ""
        words.append(f"due {format_duration(stage.due)}{then}")
    return f"{stage.name}: {'; '.join(words)}"
