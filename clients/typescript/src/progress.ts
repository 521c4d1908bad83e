// Where a review under a rule stands (docs/review-rules.md), read from an Operation as plain values:
// the generated ReviewProgress message with its times as Dates and what the current stage still needs.

import { timestampDate } from "@bufbuild/protobuf/wkt";

import { Outcome } from "./gen/decisionflow/v1/common_pb.js";
import type { Operation } from "./gen/decisionflow/v1/review_pb.js";

export interface ReviewStanding {
  /** The current stage, 0 for the first (the last one once the review is complete). */
  stageIndex: number;
  stageName: string;
  stageCount: number;
  /** The principals whose approvals count in the current stage, in the order given. */
  approvalsGiven: string[];
  /** How many approvals the current stage needs in all. */
  approvalsNeeded: number;
  /** How many more approvals the current stage needs (0 once it has them all). */
  approvalsMissing: number;
  /** The groups whose members may decide the current stage now; empty: any reviewer. */
  eligibleGroups: string[];
  due: Date | undefined;
  escalated: boolean;
  deadline: Date | undefined;
}

/** Where the operation's review stands, or undefined under the default rule (one approval by any reviewer). */
export function reviewStanding(operation: Operation): ReviewStanding | undefined {
  const progress = operation.progress;
  if (progress === undefined) {
    return undefined;
  }
  return {
    stageIndex: progress.stageIndex,
    stageName: progress.stageName,
    stageCount: progress.stageCount,
    approvalsGiven: [...progress.approvalsGiven],
    approvalsNeeded: progress.approvalsNeeded,
    approvalsMissing: Math.max(progress.approvalsNeeded - progress.approvalsGiven.length, 0),
    eligibleGroups: [...progress.eligibleGroups],
    due: progress.dueTime === undefined ? undefined : timestampDate(progress.dueTime),
    escalated: progress.escalated,
    deadline: progress.deadline === undefined ? undefined : timestampDate(progress.deadline),
  };
}

/** Whether an Approve answer is a vote the rule counted while the review needs more: an answer, not an error;
 * nothing is written at the receiver yet, and the answer's operation carries where the review stands. */
export function awaitingApprovals(outcome: Outcome): boolean {
  return outcome === Outcome.AWAITING_APPROVALS;
}
