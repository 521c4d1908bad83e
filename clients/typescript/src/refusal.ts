// A failed decisionflow call, read the way the Python client reads it: the status code, the
// google.rpc.ErrorInfo (reason, metadata), BadRequest field violations and RetryInfo delay decoded
// from the grpc-status-details-bin trailer, and whether the refusal is definite (the request
// certainly had no effect) or the outcome is open (the server may have acted: repeat the same call,
// with the same operation id, or read the operation). The table below is the client guide's table.

import { fromBinary } from "@bufbuild/protobuf";
import { anyIs, anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { type Status, StatusSchema } from "./gen/google/rpc/status_pb.js";

export const ERROR_DOMAIN = "decisionflow.v1";
export const STATUS_DETAILS_TRAILER = "grpc-status-details-bin";

/** What a caller does next: "automatic" (transient: retry with back-off, same request), "yes"
 * (indeterminate: repeat the same call or read the operation), "no" (definite: repeating changes nothing). */
export type Retry = "automatic" | "yes" | "no";

/** The status a reason travels with and the ErrorInfo metadata keys it carries. */
export interface ReasonContract {
  readonly code: Code;
  readonly metadataKeys: readonly string[];
}

/** Every reason the services send, with its status code and ErrorInfo metadata keys. */
export const REASONS: Readonly<Record<string, ReasonContract>> = {
  INVALID_ARGUMENT: { code: Code.InvalidArgument, metadataKeys: [] },
  DECISION_REQUIRED: { code: Code.InvalidArgument, metadataKeys: [] },
  NOT_FOUND: { code: Code.NotFound, metadataKeys: ["operation_id", "case_id", "tree_size"] },
  STALE_PROPOSAL: { code: Code.FailedPrecondition, metadataKeys: ["operation_id", "current_operation_id"] },
  CASE_HAS_OPEN_PROPOSAL: { code: Code.FailedPrecondition, metadataKeys: ["case_id", "current_operation_id"] },
  DECISION_CONFLICT: { code: Code.AlreadyExists, metadataKeys: ["operation_id", "recorded_decision"] },
  NOT_REDRIVABLE: { code: Code.FailedPrecondition, metadataKeys: ["operation_id", "state"] },
  WORKFLOW_VERSION_MISMATCH: { code: Code.FailedPrecondition, metadataKeys: ["operation_id", "recorded", "running"] },
  IDEMPOTENCY_KEY_REUSED: { code: Code.FailedPrecondition, metadataKeys: ["operation_id"] },
  KEY_RETENTION_EXCEEDED: {
    code: Code.FailedPrecondition,
    metadataKeys: ["operation_id", "first_attempted_at", "key_retention"],
  },
  CHECKPOINT_INTEGRITY: { code: Code.DataLoss, metadataKeys: ["operation_id", "checkpoint_id"] },
  CHECKPOINT_SAVE_FAILED: { code: Code.Unavailable, metadataKeys: [] },
  UNAVAILABLE: { code: Code.Unavailable, metadataKeys: [] },
  REPLY_LOST: { code: Code.Unavailable, metadataKeys: ["operation_id"] },
  WORKFLOW_PROTOCOL: { code: Code.Internal, metadataKeys: [] },
  UNAUTHENTICATED: { code: Code.Unauthenticated, metadataKeys: [] },
  PERMISSION_DENIED: { code: Code.PermissionDenied, metadataKeys: ["rpc", "principal", "required_roles"] },
  FOUR_EYES: { code: Code.PermissionDenied, metadataKeys: ["principal"] },
  CALL_RATE_EXCEEDED: { code: Code.ResourceExhausted, metadataKeys: ["principal", "retry_after"] },
  CONTENT_BUDGET_EXCEEDED: {
    code: Code.ResourceExhausted,
    metadataKeys: ["principal", "retry_after", "content_bytes"],
  },
  TOO_MANY_OPEN_REVIEWS: { code: Code.FailedPrecondition, metadataKeys: ["principal", "open_review_limit"] },
  REVIEW_EXPIRED: { code: Code.FailedPrecondition, metadataKeys: ["operation_id"] },
  BEYOND_CHECKPOINT: {
    code: Code.FailedPrecondition,
    metadataKeys: ["checkpoint_size", "tree_size", "leaf_index", "operation_id", "case_id"],
  },
};

// Refusals: the request certainly had no effect.
const DEFINITE_CODES: ReadonlySet<Code> = new Set([
  Code.InvalidArgument,
  Code.FailedPrecondition,
  Code.AlreadyExists,
  Code.PermissionDenied,
  Code.Unauthenticated,
  Code.NotFound,
]);
// A tampered checkpoint is refused before anything runs; it needs an operator, not a retry. A spent
// budget is refused before anything runs too; the same request passes after the RetryInfo delay.
const DEFINITE_REASONS: ReadonlySet<string> = new Set([
  "CHECKPOINT_INTEGRITY",
  "CALL_RATE_EXCEEDED",
  "CONTENT_BUDGET_EXCEEDED",
]);
// Refusals that depend on who calls or on state: after an earlier indeterminate attempt of the
// same call they prove nothing about that attempt.
const CALLER_DEPENDENT_CODES: ReadonlySet<Code> = new Set([
  Code.PermissionDenied,
  Code.Unauthenticated,
  Code.NotFound,
  Code.ResourceExhausted,
]);
const RETRIED_CODES: ReadonlySet<Code> = new Set([Code.Unavailable, Code.DeadlineExceeded, Code.ResourceExhausted]);

/** Whether a failure with this code and reason is definite, and what a caller does next. */
export function contractOf(code: Code, reason: string, attempts = 1): { definite: boolean; retry: Retry } {
  let definite = DEFINITE_REASONS.has(reason) || DEFINITE_CODES.has(code);
  if (attempts > 1 && CALLER_DEPENDENT_CODES.has(code)) {
    definite = false;
  }
  const retry: Retry = RETRIED_CODES.has(code) ? "automatic" : definite ? "no" : "yes";
  return { definite, retry };
}

export interface FieldViolation {
  readonly field: string;
  readonly description: string;
}

/** A failed call: its status, ErrorInfo and field violations, and what they mean for the caller. */
export interface Refusal {
  readonly code: Code;
  readonly message: string;
  readonly reason: string;
  readonly domain: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly violations: readonly FieldViolation[];
  /** True: the request certainly had no effect. False: the server may have acted. */
  readonly definite: boolean;
  readonly retry: Retry;
  /** The delay the refusal's RetryInfo asks for before the same request (milliseconds); undefined: none. */
  readonly retryAfterMs?: number;
}

/** Decode the grpc-status-details-bin trailer (base64, padding optional) into a google.rpc.Status. */
export function decodeStatusDetails(value: string): Status {
  return fromBinary(StatusSchema, Buffer.from(value, "base64"));
}

/** Read any failure of a call (a ConnectError, or anything else thrown) as a Refusal.
 *
 * attempts is how many times the caller has sent this same call: a caller-dependent refusal
 * (PERMISSION_DENIED, UNAUTHENTICATED, NOT_FOUND) after an indeterminate attempt is indeterminate.
 */
export function refusalOf(error: unknown, attempts = 1): Refusal {
  const failure = ConnectError.from(error);
  let reason = "";
  let domain = "";
  let metadata: Record<string, string> = {};
  const violations: FieldViolation[] = [];
  let retryAfterMs: number | undefined;
  const trailer = failure.metadata.get(STATUS_DETAILS_TRAILER);
  if (trailer) {
    for (const detail of decodeStatusDetails(trailer).details) {
      if (anyIs(detail, ErrorInfoSchema)) {
        const info = anyUnpack(detail, ErrorInfoSchema);
        if (info) {
          ({ reason, domain } = info);
          metadata = { ...info.metadata };
        }
      } else if (anyIs(detail, BadRequestSchema)) {
        const bad = anyUnpack(detail, BadRequestSchema);
        for (const violation of bad?.fieldViolations ?? []) {
          violations.push({ field: violation.field, description: violation.description });
        }
      } else if (anyIs(detail, RetryInfoSchema)) {
        const delay = anyUnpack(detail, RetryInfoSchema)?.retryDelay;
        if (delay) {
          retryAfterMs = Math.max(0, Number(delay.seconds) * 1000 + delay.nanos / 1e6);
        }
      }
    }
  }
  const { definite, retry } = contractOf(failure.code, reason, attempts);
  return {
    code: failure.code,
    message: failure.rawMessage,
    reason,
    domain,
    metadata,
    violations,
    definite,
    retry,
    retryAfterMs,
  };
}

/** The gRPC name of a status code, as the guide and the other clients spell it (FAILED_PRECONDITION). */
export function codeName(code: Code): string {
  return (Code[code] ?? String(code)).replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase().replace("CANCELED", "CANCELLED");
}
