"""Approve exactly once from an asyncio service, with tenacity's AsyncRetrying around the call.

    python examples/approve_async.py ORCHESTRATOR_TARGET [--token-file FILE] [--case-id T-2001]

The story, one line printed per step:

1. start a review of a support reply (case ``--case-id``) and approve it; a failure whose
   ``error.definite`` is False (the reply was lost: the orchestrator may have acted), and an answer
   with outcome Unknown (returned, not raised), are retried with the same operation id, so the
   server replays the decision and the effect stays single;
2. start new content for the case, and edit it, as a second reviewer would in another tab;
3. approve the proposal the first tab still shows: refused as STALE_PROPOSAL, a definite refusal
   that names the case's current operation id; approve that one instead.

It needs only the light client (``pip install ./clients/python``), and a token (``--token-file``,
when the orchestrator authenticates) whose principal holds the roles author (StartReview,
EditProposal) and reviewer (Approve); with ``--four-eyes true`` on the orchestrator the author may
not approve, so run it with four-eyes off.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import tenacity

from decisionflow.channels import open_aio_channel
from decisionflow.client import (
    ApproveResult,
    AsyncReviewClient,
    DecisionflowError,
    EvidenceItem,
    Outcome,
    PolicyRef,
    StaleProposal,
)

ACTION = "record_support_review"
EVIDENCE = (EvidenceItem("KB-12", 1, "Update to 4.2.1."),)
POLICY = PolicyRef("support-replies", "2026-10", allowance_units=9)
BODY = "This is a known firmware issue; version 4.2.1 fixes it."


def _indeterminate(error: BaseException) -> bool:
    # Only an outcome the caller cannot know is retried; a definite refusal is final.
    return isinstance(error, DecisionflowError) and not error.definite


def _unknown(result: ApproveResult) -> bool:
    # Unknown is an answer, not an error: the decision stands and the effect may or may not exist.
    # The same Approve again replays the decision and drives the same key once more.
    return result.outcome is Outcome.UNKNOWN


def _last_outcome(state: tenacity.RetryCallState) -> ApproveResult:
    # Out of attempts: raise the last error, or return the last answer (still Unknown: the
    # reconciler settles it later; never report it as a success or a failure).
    assert state.outcome is not None
    result: ApproveResult = state.outcome.result()
    return result


def _report(state: tenacity.RetryCallState) -> None:
    assert state.outcome is not None
    error = state.outcome.exception()
    seen = error if error is not None else f"outcome {state.outcome.result().outcome.name}"
    print(f"  attempt {state.attempt_number} indeterminate: {seen}")


async def approve_once(reviews: AsyncReviewClient, operation_id: str) -> tuple[ApproveResult, int]:
    """Approve operation_id, repeating it with the same id after an indeterminate failure or an Unknown
    outcome; return the last answer and how many attempts it took."""
    retrying = tenacity.AsyncRetrying(
        stop=tenacity.stop_after_attempt(4) | tenacity.stop_after_delay(30),
        wait=tenacity.wait_random_exponential(multiplier=0.2, max=2.0),
        retry=tenacity.retry_if_exception(_indeterminate) | tenacity.retry_if_result(_unknown),
        retry_error_callback=_last_outcome,
        before_sleep=_report,
    )
    result: ApproveResult = await retrying(reviews.approve, operation_id)
    return result, retrying.statistics["attempt_number"]


async def story(target: str, token: str | None, case_id: str) -> None:
    """Run the three steps against the orchestrator at target."""
    async with open_aio_channel(target, token=token) as channel:
        reviews = AsyncReviewClient(channel, timeout=5.0)

        first = await reviews.start_review(case_id, ACTION, BODY, EVIDENCE, POLICY)
        operation_id = first.proposal.operation_id
        print(f"started {operation_id}")
        result, attempts = await approve_once(reviews, operation_id)
        receipt = result.operation.receipt_id
        print(f"approved {operation_id}: outcome {result.outcome.name}, replay {result.replay}, attempts {attempts}")
        print(f"  receipt {receipt}")

        tab = await reviews.start_review(case_id, ACTION, BODY + " Thanks for your patience.", EVIDENCE, POLICY)
        shown = tab.proposal.operation_id
        edited = await reviews.edit_proposal(shown, BODY + " Thanks for waiting.", EVIDENCE, POLICY)
        print(f"started {shown}, edited to {edited.proposal.operation_id}")

        try:
            await reviews.approve(shown)
        except StaleProposal as stale:
            print(f"stale: {stale.reason} definite {stale.definite}, current {stale.current_operation_id}")
            result, attempts = await approve_once(reviews, stale.current_operation_id)
            print(f"approved {stale.current_operation_id}: outcome {result.outcome.name}, attempts {attempts}")
        else:
            raise SystemExit("the superseded proposal was approved: the stale tab was not refused")


def main() -> None:
    """Parse the command line and run the story."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("target", help="the orchestrator, host:port")
    parser.add_argument(
        "--token-file", type=Path, help="a file holding the bearer token of a principal with roles author and reviewer"
    )
    parser.add_argument("--case-id", default="T-2001")
    args = parser.parse_args()
    token = args.token_file.read_text().strip() if args.token_file else None
    asyncio.run(story(args.target, token, args.case_id))


if __name__ == "__main__":
    main()
