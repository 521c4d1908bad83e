"""The documentation stays true of the repository: every cited page exists, every relative link
resolves, the tables generated from the declaration of refusals are current, and the worked identity
example still computes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from decisionflow import reasons
from tests.support.cli import SCRIPTS
from tools import gen_refusals

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCANNED_DIRS = (
    "protos",
    "clients",
    "decisionflow",
    "orchestrator",
    "effect_receiver",
    "reconciler",
    "deploy",
    "bench",
    "tools",
)
SKIPPED_PARTS = {"__pycache__", "out", "node_modules", "dist"}
PAGES = sorted(DOCS.glob("*.md"))

# A citation is a *.md file name (with any directories before it) or a path under docs/. The
# lookbehind keeps the tail of a URL or of a longer path from being read as a citation of its own.
MD_CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
DOCS_CITATION = re.compile(r"(?<![\w/.-])(docs/[\w./-]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _citations(text: str) -> set[str]:
    found = set(MD_CITATION.findall(text))
    found |= {path.rstrip(".") for path in DOCS_CITATION.findall(text)}
    return found


def _resolves(citation: str, cited_from: Path) -> bool:
    return (ROOT / citation).exists() or (cited_from.parent / citation).exists()


def _scanned_files() -> list[Path]:
    files = [ROOT / "README.md", *PAGES]
    for name in SCANNED_DIRS:
        for path in sorted((ROOT / name).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if path.is_file() and not SKIPPED_PARTS.intersection(parts) and not _built(parts):
                files.append(path)
    return files


def _built(parts: tuple[str, ...]) -> bool:
    # What an editable install writes next to the sources (egg-info) cites what the sources do.
    return any(part.endswith(".egg-info") for part in parts)


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None  # a binary file cites nothing


def missing_citations(files: list[Path]) -> list[str]:
    """Return 'file: citation' for every cited *.md file or docs/ path that does not exist."""
    missing = []
    for path in files:
        text = _text(path)
        if text is None:
            continue
        for citation in sorted(_citations(text)):
            if not _resolves(citation, path):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                missing.append(f"{where}: {citation}")
    return missing


def test_the_documented_pages_exist() -> None:
    names = {page.name for page in PAGES}
    expected = {
        "README.md",
        "architecture.md",
        "identities.md",
        "review-protocol.md",
        "effect-receiver.md",
        "reconciler.md",
        "errors.md",
        "clients.md",
        "security.md",
        "demo.md",
    }
    assert expected <= names
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for name in expected - {"README.md"}:
        assert f"]({name})" in index, f"docs/README.md does not link {name}"


def test_every_cited_file_in_the_sources_and_docs_exists() -> None:
    files = _scanned_files()
    assert len(files) > 50
    assert missing_citations(files) == []


def test_a_missing_citation_is_reported(tmp_path: Path) -> None:
    cited = tmp_path / "module.py"
    cited.write_text('"""See docs/no-such-page.md and NOWHERE.md; docs/errors.md exists."""\n')
    assert missing_citations([cited]) == ["module.py: NOWHERE.md", "module.py: docs/no-such-page.md"]


def _subcommands(help_output: str) -> list[str]:
    # Subcommands are listed indented under "positional arguments:" or named in braces.
    names = re.findall(r"^    ([a-z][a-z-]*)(?:\s|$)", help_output, re.MULTILINE)
    for group in re.findall(r"\{([a-z,-]+)\}", help_output):
        names += group.split(",")
    return list(dict.fromkeys(names))


def _help(words: list[str]) -> str:
    # As a user runs it: the console script from the virtual environment, at the repository root.
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "COLUMNS": "10000"}
    done = subprocess.run(
        [*words, "--help"], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env=env
    )
    assert done.returncode == 0, (words, done.stderr)
    return done.stdout


@pytest.mark.slow  # about thirty --help processes
def test_every_file_cited_by_the_command_line_help_exists() -> None:
    pending = [[script] for script in SCRIPTS]
    seen: dict[str, str] = {}
    while pending:
        words = pending.pop()
        command = " ".join(words)
        assert len(seen) < 100, "the walk over subcommands does not end"
        output = _help(words)
        # An option's choices ({yes,no}) look like subcommands; only a real one has its own usage line.
        if not output.startswith(f"usage: {command} "):
            continue
        seen[command] = output
        pending += [[*words, name] for name in _subcommands(output) if f"{command} {name}" not in seen]
    assert "decisionflow identity" in seen and "decisionflow-orchestrator reopen-reviews" in seen
    missing = [
        f"{command} --help: {citation}"
        for command, output in seen.items()
        for citation in sorted(_citations(output))
        if not (ROOT / citation).exists()
    ]
    assert missing == []
    assert "docs/identities.md" in seen["decisionflow identity"]


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part.replace("\\_", "_")) if path_part else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked.read_text(encoding="utf-8")), f"{page.name}: {target}"


def _anchors(markdown: str) -> set[str]:
    # GitHub's heading ids: lower case, punctuation dropped, spaces become hyphens.
    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_the_tables_generated_from_the_declaration_of_refusals_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    assert gen_refusals.main(["--check"]) == 0, capsys.readouterr().err


def test_the_errors_page_lists_every_declared_reason_with_its_status() -> None:
    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| `([A-Z_]+)` \|", page, re.MULTILINE))
    assert rows == {declared.reason: declared.status for declared in reasons.REFUSALS.values()}
    assert rows["STALE_PROPOSAL"] == "FAILED_PRECONDITION"


def test_identities_page_example_computes_the_documented_ids() -> None:
    page = (DOCS / "identities.md").read_text(encoding="utf-8")
    proposal = re.search(r"```json\n(.*?)```", page, re.DOTALL)
    printed = re.search(r"```\n(\{\"operation_id\".*?)```", page, re.DOTALL)
    assert proposal is not None and printed is not None
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / "decisionflow"), "identity", "operation", "-"],
        input=proposal.group(1),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    )
    assert json.loads(done.stdout) == json.loads(printed.group(1))
