"""Where a review under a rule stands, as the review commands print it: JSON fields and a human clause."""

from __future__ import annotations

from typing import Any

from decisionflow.client import ReviewProgress


def progress_fields(progress: ReviewProgress | None) -> dict[str, Any]:
    """Return the progress fields the JSON answer carries; None (the default rule) gives them all as null."""
    if progress is None:
        return {"progress": None}
    return {
        "progress": {
            "stage": progress.stage_name,
            "stage_index": progress.stage_index,
            "stage_count": progress.stage_count,
            "approvals_given": list(progress.approvals_given),
            "approvals_needed": progress.approvals_needed,
            "eligible_groups": list(progress.eligible_groups),
            "due": progress.due_time,
            "escalated": progress.escalated,
            "deadline": progress.deadline,
        }
    }


def standing(progress: ReviewProgress) -> str:
    """Return '1 of 2 approvals in stage leads, by lena' for progress."""
    given = progress.approvals_given
    by = f", by {', '.join(given)}" if given else ""
    return f"{len(given)} of {progress.approvals_needed} approvals in stage {progress.stage_name}{by}"


def waiting(progress: ReviewProgress) -> str:
    """Return 'waiting for 1 more (1 of 2 approvals in stage leads, by lena)' for a vote that counted."""
    more = max(progress.approvals_needed - len(progress.approvals_given), 0)
    return f"waiting for {more} more ({standing(progress)})"


def described(progress: ReviewProgress) -> str:
    """Return the clause status and show append: stage k of n, approvals, who may decide, due and deadline."""
    groups = ", ".join(progress.eligible_groups) or "any reviewer"
    parts = [
        f"stage {progress.stage_index + 1} of {progress.stage_count}",
        standing(progress),
        f"decided by {groups}",
    ]
    if progress.due_time is not None:
        parts.append(f"due {progress.due_time.isoformat()}" + (", escalated" if progress.escalated else ""))
    if progress.deadline is not None:
        parts.append(f"deadline {progress.deadline.isoformat()}")
    return "; ".join(parts)
