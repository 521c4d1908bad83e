"""Writes (or checks) every table generated from the declaration of refusals (decisionflow.reasons).

python tools/gen_refusals.py --write   # regenerate the sections between the markers
python tools/gen_refusals.py --check   # exit 1 when one is stale

The sections: the TypeScript client's refusal table (clients/typescript/src/refusal.ts), the reasons
and metadata keys of docs/errors.md, and the failure table of the client guide (docs/clients.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import grpc

from decisionflow import reasons, retry
from decisionflow.client import errors
from decisionflow.reasons import Refusal

ROOT = Path(__file__).resolve().parents[1]
TOOL = "tools/gen_refusals.py"
RULES = {rule.status: rule for rule in reasons.STATUS_RULES}
# Connect's Code enum spells each gRPC status in camel case, CANCELLED with one L.
CONNECT_SPELLING = {"CANCELLED": "Canceled"}
LINE = 120


def connect_code(status: str) -> str:
    """Return the TypeScript expression of a gRPC status (Code.FailedPrecondition)."""
    return "Code." + CONNECT_SPELLING.get(status, "".join(word.title() for word in status.split("_")))


def status_definite(status: str) -> bool:
    """Whether a refusal with status and no declared reason is definite."""
    return status in RULES and RULES[status].definite


def raised_as(declared: Refusal) -> str:
    """The Python client's class for declared: the class that names it, else its status's."""
    return errors.error_class(grpc.StatusCode[declared.status], declared.reason).__name__


def retry_answer(status: str, definite: bool) -> str:
    """What a caller does next: the clients retry it themselves, repeat it (indeterminate), or not (definite)."""
    if status in {code.name for code in retry.RETRYABLE_CODES}:
        return "automatic"
    return "no" if definite else "yes"


def yes_no(flag: bool) -> str:
    """Return flag as the tables spell it."""
    return "yes" if flag else "no"


def keys_text(keys: Iterable[str]) -> str:
    """Return metadata keys as the tables spell them (`operation_id`, `state`)."""
    return ", ".join(f"`{key}`" for key in keys)


def from_docs(markdown: str) -> str:
    """Return markdown with its links to docs/ pages (written from the repository's root) made relative to docs/."""
    return re.sub(r"\[docs/([^\]]*)\]\(docs/", r"[\1](", markdown)


def details(declared: Refusal) -> str:
    """The status details beside ErrorInfo: a BadRequest with every INVALID_ARGUMENT, a RetryInfo with a delay."""
    if declared.status == "INVALID_ARGUMENT":
        return "a `BadRequest` names each bad field"
    return "a `RetryInfo`" if reasons.RETRY_AFTER in declared.metadata else ""


def errors_reasons() -> str:
    """docs/errors.md: every reason with its status, definiteness, metadata, when it is sent, and by which RPCs."""
    rows = [
        "| reason | status | definite | retry | ErrorInfo metadata | when | RPCs |",
        "|---|---|---|---|---|---|---|",
    ]
    for declared in reasons.REFUSALS.values():
        guide = reasons.GUIDE[declared.reason]
        metadata = "; ".join(part for part in (keys_text(declared.metadata), details(declared)) if part) or "—"
        answer = f"{yes_no(declared.definite)} | {retry_answer(declared.status, declared.definite)}"
        rows.append(
            f"| `{declared.reason}` | `{declared.status}` | {answer} | {metadata} | {from_docs(guide.when)} | "
            f"{guide.rpcs} |"
        )
    return "\n".join(rows)


def errors_metadata() -> str:
    """docs/errors.md: every ErrorInfo metadata key, what it holds and the reasons that carry it."""
    rows = ["| key | what it holds | carried by |", "|---|---|---|"]
    for key, meaning in reasons.METADATA_KEY_MEANINGS.items():
        carriers = ", ".join(f"`{d.reason}`" for d in reasons.REFUSALS.values() if key in d.metadata)
        rows.append(f"| `{key}` | {meaning} | {carriers} |")
    return "\n".join(rows)


def clients_contract() -> str:
    """docs/clients.md: what each failure means to a caller, by status and reason, and the class it is raised as."""
    rows = [
        "| status | reason | definite | retry with the same operation id | ErrorInfo metadata | Python client raises |",
        "|---|---|---|---|---|---|",
    ]
    for declared in reasons.REFUSALS.values():
        keys = keys_text(declared.metadata) or "—"
        if detail := details(declared):
            keys += f" (and {detail})" if declared.metadata else f" ({detail})"
        rows.append(
            f"| `{declared.status}` | `{declared.reason}` | {yes_no(declared.definite)} | "
            f"{retry_answer(declared.status, declared.definite)} | {keys} | `{raised_as(declared)}` |"
        )
    for rule in reasons.STATUS_RULES:
        rows.append(
            f"| `{rule.status}` | — | {yes_no(rule.definite)} | {retry_answer(rule.status, rule.definite)} | — | "
            f"`{rule.raised_as}` |"
        )
    rows.append(
        f"| any other (`UNKNOWN`, `INTERNAL`, `CANCELLED`, `DATA_LOSS`, …) | — | no | yes | — | "
        f"`{reasons.OTHER_STATUS_RAISED_AS}` |"
    )
    return "\n".join(rows)


def _ts_set(comment: str, name: str, element: str, members: Iterable[str]) -> list[str]:
    return [
        "",
        *(f"// {line}" for line in textwrap.wrap(comment, LINE - 20)),
        f"const {name}: ReadonlySet<{element}> = new Set([",
        *(f"  {member}," for member in members),
        "]);",
    ]


def typescript_table() -> str:
    """refusal.ts: REASONS and the sets contractOf decides by, as the Python client decides."""
    lines = [
        "/** Every reason the services send, with its status code and ErrorInfo metadata keys. */",
        "export const REASONS: Readonly<Record<string, ReasonContract>> = {",
    ]
    for declared in reasons.REFUSALS.values():
        code = connect_code(declared.status)
        keys = "[" + ", ".join(f'"{key}"' for key in declared.metadata) + "]"
        line = f"  {declared.reason}: {{ code: {code}, metadataKeys: {keys} }},"
        if len(line) <= LINE:
            lines.append(line)
        else:
            lines += [f"  {declared.reason}: {{", f"    code: {code},", f"    metadataKeys: {keys},", "  },"]
    lines.append("};")
    # contractOf takes a declared reason as definite whatever its code; one that is indeterminate under a
    # definite status it cannot say.
    if undefinite := [d.reason for d in reasons.REFUSALS.values() if not d.definite and status_definite(d.status)]:
        raise SystemExit(f"refusal.ts cannot say {undefinite} are indeterminate under a definite status")
    definite_reasons = [d for d in reasons.REFUSALS.values() if d.definite and not status_definite(d.status)]
    lines += _ts_set(
        "Refusals: the request certainly had no effect.",
        "DEFINITE_CODES",
        "Code",
        [connect_code(rule.status) for rule in reasons.STATUS_RULES if rule.definite],
    )
    lines += _ts_set(
        "Reasons definite under a status that is not, whatever the status says: "
        + ", ".join(f"{d.reason} ({d.status})" for d in definite_reasons)
        + ".",
        "DEFINITE_REASONS",
        "string",
        [f'"{d.reason}"' for d in definite_reasons],
    )
    lines += _ts_set(
        "Refusals that depend on who calls or on state: after an earlier indeterminate attempt of the "
        "same call they prove nothing about that attempt.",
        "CALLER_DEPENDENT_CODES",
        "Code",
        [connect_code(rule.status) for rule in reasons.STATUS_RULES if rule.caller_dependent],
    )
    lines += _ts_set(
        "Retried by the clients themselves (the Python client's RETRYABLE_CODES).",
        "RETRIED_CODES",
        "Code",
        sorted(connect_code(code.name) for code in retry.RETRYABLE_CODES),
    )
    return "\n".join(lines)


def markdown_markers(name: str) -> tuple[str, str]:
    """The lines that open and close a generated section of a Markdown page."""
    return (
        f"<!-- refusals:{name}:begin (generated by {TOOL} from decisionflow/reasons/; do not edit) -->",
        f"<!-- refusals:{name}:end -->",
    )


TYPESCRIPT_MARKERS = (
    f"// refusals:begin (generated by {TOOL} from decisionflow/reasons/; do not edit)",
    "// refusals:end",
)

# Each generated file: its path, and the sections in it with their markers and content.
SECTIONS: dict[str, list[tuple[tuple[str, str], Callable[[], str]]]] = {
    "clients/typescript/src/refusal.ts": [(TYPESCRIPT_MARKERS, typescript_table)],
    "docs/errors.md": [(markdown_markers("reasons"), errors_reasons), (markdown_markers("metadata"), errors_metadata)],
    "docs/clients.md": [(markdown_markers("contract"), clients_contract)],
}


def render(path: str, text: str) -> str:
    """Return text (the file at path) with each of its generated sections written anew."""
    for (begin, end), content in SECTIONS[path]:
        head, found, rest = text.partition(begin + "\n")
        if not found or end not in rest:
            raise SystemExit(f"{path} lacks the markers {begin!r} … {end!r}")
        text = f"{head}{begin}\n{content()}\n{end}{rest.split(end, 1)[1]}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Write or check every generated section; with --check, 1 when one is stale."""
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = cli.add_mutually_exclusive_group(required=True)
    for flag in ("--write", "--check"):
        mode.add_argument(flag, action="store_true")
    args = cli.parse_args(argv)
    stale = []
    for path in SECTIONS:
        current = (ROOT / path).read_text(encoding="utf-8")
        wanted = render(path, current)
        if wanted != current:
            stale.append(path)
            if args.write:
                (ROOT / path).write_text(wanted, encoding="utf-8")
    if stale and args.check:
        sys.stderr.write(f"stale against decisionflow/reasons/: {', '.join(stale)}; run python {TOOL} --write\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
