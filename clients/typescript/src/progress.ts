// Where a review under a rule stands (docs/review-rules.md), read from an Operation as plain values:
// the generated ReviewProgress message with its times as Dates and what the current stage still needs.

import { timestampDate } from "@bufbuild/protobuf/wkt";

import { Outcome } from "./gen/decisionflow/v1/common_pb.js";
import type { Operation, StageTally } from "./gen/decisionflow/v1/review_pb.js";

/** One stage of the review begun so far: who approved and declined it, and when it began, was due, was escalated and ended. */
export interface StageStanding {
  /** The stage's place in the rule, 0 for the first. */
  stageIndex: number;
  stageName: string;
  /** The principals whose approvals count in the stage, in the order given. */
  approvalsGiven: string[];
  approvalsNeeded: number;
  /** The principals who declined in the stage, in the order given. */
  declines: string[];
  declinesToEnd: number;
  started: Date | undefined;
  due: Date | undefined;
  /** When the stage was escalated to its escalation groups; undefined when it was not. */
  escalated: Date | undefined;
  /** When the vote that completed or declined the stage was counted; undefined while it is being decided. */
  ended: Date | undefined;
}

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
  /** Every stage begun so far, in the rule's order: the last is the current one. */
  stages: StageStanding[];
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
    stages: progress.stages.map(stageStanding),
  };
}

function stageStanding(stage: StageTally): StageStanding {
  return {
    stageIndex: stage.stageIndex,
    stageName: stage.stageName,
    approvalsGiven: [...stage.approvalsGiven],
    approvalsNeeded: stage.approvalsNeeded,
    declines: [...stage.declines],
    declinesToEnd: stage.declinesToEnd,
    started: stage.startedAt === undefined ? undefined : timestampDate(stage.startedAt),
    due: stage.dueTime === undefined ? undefined : timestampDate(stage.dueTime),
    escalated: stage.escalatedAt === undefined ? undefined : timestampDate(stage.escalatedAt),
    ended: stage.endedAt === undefined ? undefined : timestampDate(stage.endedAt),
  };
}

/** Whether an Approve answer is a vote the rule counted while the review needs more: an answer, not an error;
 * nothing is written at the receiver yet, and the answer's operation carries where the review stands. */
export function awaitingApprovals(outcome: Outcome): boolean {
  return outcome === Outcome.AWAITING_APPROVALS;
}
