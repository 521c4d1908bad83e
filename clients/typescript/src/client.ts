// Clients of the orchestrator's ReviewService, OperationsService, AuditService and EventService over gRPC
// (HTTP/2), with a deadline on every call and the same transient-failure retries as the Python client.

import { type Client, Code, type Interceptor, type Transport, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";

import { AuditService } from "./gen/decisionflow/v1/audit_pb.js";
import { EventService } from "./gen/decisionflow/v1/events_pb.js";
import { OperationsService } from "./gen/decisionflow/v1/operations_pb.js";
import { ReviewService } from "./gen/decisionflow/v1/review_pb.js";
import { refusalOf } from "./refusal.js";

/** The deadline of a call that names none (each attempt's; the guide gives advice per RPC). */
export const DEFAULT_TIMEOUT_MS = 5_000;

export interface ConnectOptions {
  /** A bearer token sent as ``authorization: Bearer <token>``; beyond loopback only over https. */
  readonly token?: string;
  /** The deadline of each call that names none. */
  readonly timeoutMs?: number;
  /** "https" with a CA-trusted server certificate; "http" (the default) is for loopback. */
  readonly scheme?: "http" | "https";
  /** Send the token over plain http beyond loopback all the same (refused otherwise). */
  readonly allowCleartextToken?: boolean;
}

/** Whether target's literal host is loopback: localhost, 127.0.0.0/8 or ::1 (nothing is resolved). */
export function isLoopback(target: string): boolean {
  const host = (target.startsWith("[") ? target.slice(1, target.indexOf("]")) : target.slice(0, target.lastIndexOf(":")))
    .toLowerCase();
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function bearer(token: string): Interceptor {
  return (next) => async (request) => {
    request.header.set("authorization", `Bearer ${token}`);
    return next(request);
  };
}

function transport(target: string, options: ConnectOptions): Transport {
  // A token is a password: without TLS it goes only to a loopback target, unless the caller opts in.
  const cleartext = (options.scheme ?? "http") === "http";
  if (options.token && cleartext && !options.allowCleartextToken && !isLoopback(target)) {
    throw new Error(`refusing to send a bearer token in cleartext to ${target}: use https beyond loopback`);
  }
  return createGrpcTransport({
    baseUrl: `${options.scheme ?? "http"}://${target}`,
    defaultTimeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    interceptors: options.token ? [bearer(options.token)] : [],
  });
}

/** The replicas a target names: several for a comma-separated list ("127.0.0.1:50051,127.0.0.1:50052"). */
export function targetsOf(target: string): string[] {
  return target.split(",");
}

/** Calls taken by the replicas in turn, as the Python clients' round_robin does: a replica that is down
 * fails its call (UNAVAILABLE), and withRetries sends the next attempt to the next replica. */
function inTurn(target: string, options: ConnectOptions): Transport {
  const transports = targetsOf(target).map((one) => transport(one, options));
  let next = 0;
  const pick = () => transports[next++ % transports.length] as Transport;
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) =>
      pick().unary(method, signal, timeoutMs, header, input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) =>
      pick().stream(method, signal, timeoutMs, header, input, contextValues),
  };
}

/** A ReviewService client: StartReview, GetProposal, EditProposal, Approve, GetOperation, ListPendingReviews, GetCaller.
 * target is host:port, or several replicas' host:port separated by commas (calls taken in turn). */
export function reviewClient(target: string, options: ConnectOptions = {}): Client<typeof ReviewService> {
  return createClient(ReviewService, inTurn(target, options));
}

/** An OperationsService client (the operator API): ListOperations, SettleOperation, RedriveOperation. */
export function operationsClient(target: string, options: ConnectOptions = {}): Client<typeof OperationsService> {
  return createClient(OperationsService, inTurn(target, options));
}

/** An AuditService client (auditors and operators): GetCheckpoint, GetInclusionProof, GetConsistencyProof,
 * ListLeaves. Check what it answers with verifyInclusion against a checkpoint you opened yourself. */
export function auditClient(target: string, options: ConnectOptions = {}): Client<typeof AuditService> {
  return createClient(AuditService, inTurn(target, options));
}

/** An EventService client (authors on their own cases, auditors and operators): WatchEvents. Read the stream
 * with watchEvents (events.ts), which keeps its cursor, reconnects and sets no deadline on it; called
 * directly, the stream ends at the client's timeoutMs unless the call sets timeoutMs: 0. */
export function eventsClient(target: string, options: ConnectOptions = {}): Client<typeof EventService> {
  return createClient(EventService, inTurn(target, options));
}

/** How transient failures are retried: jittered exponential waits, bounded attempts and total time. */
export interface RetryPolicy {
  /** Attempts at most; Infinity: no count, maxTotalMs alone bounds the retries (the caller's deadline). */
  readonly maxAttempts: number;
  readonly maxTotalMs: number;
  readonly initialBackoffMs: number;
  readonly maxBackoffMs: number;
}

/** The Python client's CLIENT_DEFAULT: 5 attempts within 10 s, waits from 0.1 s up to 2 s. */
export const CLIENT_DEFAULT: RetryPolicy = { maxAttempts: 5, maxTotalMs: 10_000, initialBackoffMs: 100, maxBackoffMs: 2_000 };

/** Whether withRetries repeats a failure: a transient status, or a CANCELLED or ABORTED the caller did not
 * ask for.
 *
 * Node's HTTP/2 transport reports a server that went away mid-call (its process ended and the stream
 * was reset) as CANCELLED, or as ABORTED when the socket itself was reset (connect-node maps ECONNRESET
 * and a destroyed stream to ABORTED; which one a crash gives depends on timing), where the Python client
 * hears UNAVAILABLE and retries it. No decisionflow server answers ABORTED. All are indeterminate (the
 * server may have acted), and every decisionflow call is safe to repeat unchanged (Approve by its
 * operation id), so they are retried alike. Only the caller's own cancellation, its signal aborted,
 * ends the call. */
export function retriedByWithRetries(error: unknown, attempt: number, signal?: AbortSignal): boolean {
  const refusal = refusalOf(error, attempt);
  if (refusal.code === Code.Canceled || refusal.code === Code.Aborted) {
    return !(signal?.aborted ?? false);
  }
  return refusal.retry === "automatic";
}

/** Run call, repeating it unchanged while it fails with a transient status (UNAVAILABLE,
 * DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED) or is cancelled by anyone but the caller (pass the
 * AbortSignal the call uses as signal); throw the last failure once the policy runs out. A wait is
 * never shorter than the delay a refusal's RetryInfo asks for (a spent budget says when it refills),
 * and a delay that would outlast the policy's time ends the call at once. A call that ends
 * indeterminate here is still open: repeat it (same operation id) or read the operation. */
export async function withRetries<T>(
  call: () => Promise<T>,
  policy: RetryPolicy = CLIENT_DEFAULT,
  signal?: AbortSignal,
): Promise<T> {
  const deadline = Date.now() + policy.maxTotalMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      const window = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * 2 ** (attempt - 1));
      const wait = Math.max(window / 2 + Math.random() * (window / 2), refusalOf(error, attempt).retryAfterMs ?? 0);
      const last = attempt >= policy.maxAttempts || Date.now() + wait >= deadline;
      if (!retriedByWithRetries(error, attempt, signal) || last) {
        throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
