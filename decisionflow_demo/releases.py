"""An earlier release of this repository, taken from its git history: the service packages and the client
package as they stood at one commit, extracted into a directory that ``python -m`` run there (or with it first
on ``PYTHONPATH``) imports instead of this tree's.

The release before review rules is the parent of the commit that added ``RULES_MIGRATION``; the rolling
upgrade test runs it beside this release, and ``bench/rules_cost.py`` measures this release against it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The packages a release's services run from, and the client package its image carries (its generated
# messages, its identity and leaf encoders): the copy runs with its own, not this tree's.
SERVICE_PACKAGES = ("decisionflow_server", "orchestrator", "effect_receiver")
CLIENT_SOURCE, CLIENT_PACKAGE = "clients/python/src", "decisionflow"
# The revision that brought review rules.
RULES_MIGRATION = "orchestrator/migrations/versions/0008_review_rules.py"


class ReleaseNotInHistory(Exception):
    """The commit a release is taken from is not in this checkout's git history."""


def _git(*args: str) -> bytes | None:
    """What git answers in this checkout; None when it cannot (no git, no repository, no such commit)."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60, check=False)
    except OSError:
        return None
    return done.stdout if done.returncode == 0 else None


def release_before(added: str) -> str:
    """The commit of the release before the one that added the file added (a path in this repository): the
    parent of the commit that added it. Raises ReleaseNotInHistory, with the reason, when the history does
    not hold that parent."""
    commits = (_git("log", "--diff-filter=A", "--format=%H", "--", added) or b"").split()
    # In a shallow clone the oldest commit fetched adds every file and has no parent.
    parent = _git("rev-parse", "--verify", "--quiet", commits[-1].decode() + "^") if commits else None
    if parent is None:
        raise ReleaseNotInHistory(
            f"the previous release (the parent of the commit that added {added}) is not in this checkout's git "
            "history: a shallow clone (fetch the whole history: git fetch --unshallow), a source archive, or no git"
        )
    return parent.decode().strip()


def extract_release(commit: str, destination: Path) -> Path:
    """Extract commit's service packages and client package into destination (made here); return it."""
    destination.mkdir()
    for tree, paths in ((commit, SERVICE_PACKAGES), (f"{commit}:{CLIENT_SOURCE}", (CLIENT_PACKAGE,))):
        archive = _git("archive", "--format=tar", tree, *paths)
        if archive is None:
            raise ReleaseNotInHistory(f"git archive {tree} failed")
        subprocess.run(["tar", "-x", "-C", str(destination)], input=archive, timeout=60, check=True)
    return destination


def previous_release(destination: Path) -> Path:
    """The release before review rules, extracted into destination (see extract_release)."""
    return extract_release(release_before(RULES_MIGRATION), destination)
