"""``decisionflow pending``: the reviewer's inbox, a table for people or JSON Lines for scripts."""

from __future__ import annotations

import argparse
import itertools
import sys
from datetime import UTC, datetime
from typing import Any

from decisionflow.client import DecisionflowError, PendingReviewEntry
from decisionflow_cli import _tables as render
from decisionflow_cli.review._connection import review_client
from decisionflow_cli.review._output import EXIT_DONE, emit, failed, say, to_json

COLUMNS = ("OPERATION", "CASE", "AUTHOR", "VERSIONS", "AGE", "ACTION")
# Pages are fetched as the inbox is printed; a --limit below it asks for no more than needed.
PAGE_SIZE = 500


def table_row(entry: PendingReviewEntry, now: datetime) -> tuple[str, ...]:
    """Return the table's cells for one pending review; its age is the time since the proposal was recorded."""
    proposal = entry.proposal
    age = render.duration(render.since(proposal.created_at, now))
    return (proposal.operation_id, proposal.case_id, proposal.created_by, str(entry.versions), age, proposal.action)


def as_json(entry: PendingReviewEntry, now: datetime) -> dict[str, Any]:
    """Return every field of the entry as JSON types, with its age in seconds (null when unknown)."""
    age = render.since(entry.proposal.created_at, now)
    return {**to_json(entry), "age_seconds": None if age is None else round(age.total_seconds(), 3)}


def run_pending(args: argparse.Namespace) -> int:
    """Print the cases' current, undecided proposals matching the filters, oldest first; exit 0."""
    page_size = min(PAGE_SIZE, args.limit) if args.limit else PAGE_SIZE
    rows: list[tuple[str, ...]] = []
    with review_client(args) as reviews:
        inbox = reviews.iter_pending_reviews(
            page_size=page_size,
            case_id=args.case_id,
            case_id_prefix=args.case_prefix,
            created_by=args.author,
            action=args.action,
        )
        try:
            for entry in itertools.islice(inbox, args.limit):
                now = datetime.now(UTC)
                if args.json:
                    emit(as_json(entry, now))
                else:
                    rows.append(table_row(entry, now))
        except DecisionflowError as error:
            raise failed("pending", error, "pending reviews", print_json=False) from error
    if not args.json:
        sys.stdout.write(render.table(rows, COLUMNS) + "\n")
        sys.stdout.flush()
        say(f"{len(rows)} pending review(s)")
    return EXIT_DONE
