// Approve exactly once from Node.js:
//
//   node dist/examples/approve.js ORCHESTRATOR_TARGET [CASE_ID]
//
// 1. start a review of a support reply and approve it; a failure whose refusal is not definite
//    (the reply was lost: the orchestrator may have acted) is retried with the same operation id,
//    so the server replays the decision and the effect stays single;
// 2. start new content for the case, and edit it, as a second reviewer would in another tab;
// 3. approve the proposal the first tab still shows: refused as STALE_PROPOSAL, a definite refusal
//    whose ErrorInfo names the case's current operation id; approve that one instead.
//
// The token, if the orchestrator wants one, comes from DECISIONFLOW_TOKEN.

import { create } from "@bufbuild/protobuf";

import {
  type ApproveResponse,
  ApproveRequestSchema,
  Decision,
  EditProposalRequestSchema,
  Outcome,
  StartReviewRequestSchema,
  codeName,
  refusalOf,
  reviewClient,
  withRetries,
} from "../src/index.js";

const ACTION = "record_support_review";
const BODY = "This is a known firmware issue; version 4.2.1 fixes it.";
const EVIDENCE = [{ sourceId: "KB-12", version: 1n, quotation: "Update to 4.2.1." }];
const POLICY = { name: "support-replies", versionLabel: "2026-10", allowanceUnits: 9n, rules: {} };

type Reviews = ReturnType<typeof reviewClient>;

async function sleep(ms: number): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, ms));
}

/** Approve operationId, retrying indeterminate failures with the same id; return the answer and the attempts. */
async function approveOnce(reviews: Reviews, operationId: string): Promise<[ApproveResponse, number]> {
  const request = create(ApproveRequestSchema, { operationId, decision: Decision.APPROVE });
  for (let attempt = 1; ; attempt++) {
    try {
      return [await withRetries(() => reviews.approve(request)), attempt];
    } catch (error) {
      const refusal = refusalOf(error, attempt);
      if (refusal.definite || attempt >= 4) {
        throw error;
      }
      console.log(`  attempt ${attempt} indeterminate: ${codeName(refusal.code)}: ${refusal.message}`);
      await sleep(200 * attempt);
    }
  }
}

async function start(reviews: Reviews, caseId: string, body: string): Promise<string> {
  const request = create(StartReviewRequestSchema, { caseId, action: ACTION, body, evidence: EVIDENCE, policy: POLICY });
  const started = await withRetries(() => reviews.startReview(request));
  return started.proposal?.operationId ?? "";
}

async function main(target: string, caseId: string): Promise<void> {
  const reviews = reviewClient(target, { token: process.env.DECISIONFLOW_TOKEN, timeoutMs: 5_000 });

  const operationId = await start(reviews, caseId, BODY);
  console.log(`started ${operationId}`);
  const [approved, attempts] = await approveOnce(reviews, operationId);
  console.log(
    `approved ${operationId}: outcome ${Outcome[approved.outcome]}, replay ${approved.replay}, attempts ${attempts}`,
  );
  console.log(`  receipt ${approved.operation?.receipt?.receiptId}`);

  const shown = await start(reviews, caseId, `${BODY} Thanks for your patience.`);
  const edit = create(EditProposalRequestSchema, {
    expectedOperationId: shown,
    body: `${BODY} Thanks for waiting.`,
    evidence: EVIDENCE,
    policy: POLICY,
  });
  const edited = await withRetries(() => reviews.editProposal(edit));
  const current = edited.proposal?.operationId ?? "";
  console.log(`started ${shown}, edited to ${current}`);

  try {
    await reviews.approve(create(ApproveRequestSchema, { operationId: shown, decision: Decision.APPROVE }));
    throw new Error("the superseded proposal was approved: the stale tab was not refused");
  } catch (error) {
    const refusal = refusalOf(error);
    if (refusal.reason !== "STALE_PROPOSAL") {
      throw error;
    }
    const named = refusal.metadata.current_operation_id ?? "";
    console.log(`stale: ${refusal.reason} definite ${refusal.definite}, current ${named}`);
    const [answer, tries] = await approveOnce(reviews, named);
    console.log(`approved ${named}: outcome ${Outcome[answer.outcome]}, attempts ${tries}`);
  }
}

const [target, caseId = "T-2001"] = process.argv.slice(2);
if (!target) {
  console.error("usage: node dist/examples/approve.js ORCHESTRATOR_TARGET [CASE_ID]");
  process.exit(2);
}
main(target, caseId).catch((error: unknown) => {
  const refusal = refusalOf(error);
  console.error(`failed: ${codeName(refusal.code)} ${refusal.reason}: ${refusal.message}`);
  process.exit(1);
});
