"""One summary line per campaign, printed and, with DECISIONFLOW_CAMPAIGN_REPORT=path, kept in a JSON file."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

REPORT_ENV = "DECISIONFLOW_CAMPAIGN_REPORT"
Figure = int | float | str | bool | None


def summary_line(campaign: str, figures: Mapping[str, Figure]) -> str:
    """``campaign <name>: key=value ...`` in the order given."""
    return f"campaign {campaign}: " + " ".join(f"{key}={value}" for key, value in figures.items())


def publish(campaign: str, figures: Mapping[str, Figure]) -> str:
    """Print the campaign's summary line and, if the report variable is set, store its figures there."""
    line = summary_line(campaign, figures)
    sys.stdout.write("\n" + line + "\n")
    sys.stdout.flush()
    path = os.environ.get(REPORT_ENV)
    if path:
        store(Path(path), campaign, figures, line)
    return line


def store(path: Path, campaign: str, figures: Mapping[str, Figure], line: str) -> None:
    """Merge one campaign's figures into the JSON report (locked: campaigns may run in parallel workers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read()
        report = json.loads(text) if text.strip() else {"campaigns": {}}
        report["campaigns"][campaign] = {**figures, "summary": line}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(report, indent=2, sort_keys=True) + "\n")


def replay_hint(nodeid: str, seed: int) -> str:
    """How to run one failing seed again."""
    return f"seed {seed}; replay with: .venv/bin/pytest '{nodeid}' --seed {seed} -s"
