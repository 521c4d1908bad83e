// The orchestrator's event feed (EventService.WatchEvents), as the Python client's
// decisionflow.client.events reads it: watchEvents, an async iterable that keeps its cursor and
// reconnects, and waitForOutcome built on it.
//
// watchEvents yields every matching event from a cursor on and follows the log. It keeps the cursor
// itself: after each event its index plus one, after each heartbeat the heartbeat's nextIndex; from the
// first message on it never asks "from now" again. When the stream breaks on a status that says to come
// back (UNAVAILABLE: a restart, a failover, WATCH_FELL_BEHIND; or CANCELLED or ABORTED the caller did not
// ask for, which is how Node's HTTP/2 transport hears a server that went away) it reconnects from that
// cursor, after a back-off that starts at 0.1 s and doubles to 5 s, so the caller sees every event once,
// in index order, across reconnections. Any other failure is thrown as it came (read it with refusalOf).
//
// waitForOutcome returns the operation, as GetOperation answers it, once it is settled (SETTLED_STATES);
// the stream only says when to ask. Its order makes it miss nothing: it reads the operation, opens the
// stream "from now" on the operation's case, reads the operation again on the stream's first heartbeat,
// and then again after each event of the operation or proposal of the case. An outcome reached between
// two of those steps is either seen by the second read or sequenced after the stream's start. UNKNOWN is
// not settled: the reconciler settles it, and that settlement is an event.

import { create } from "@bufbuild/protobuf";
import { type Client, Code } from "@connectrpc/connect";

import { CLIENT_DEFAULT, withRetries } from "./client.js";
import { OperationState } from "./gen/decisionflow/v1/common_pb.js";
import {
  type Event,
  EventKind,
  type EventService,
  type Heartbeat,
  type WatchEventsRequest,
  WatchEventsRequestSchema,
} from "./gen/decisionflow/v1/events_pb.js";
import type { Operation, ReviewService } from "./gen/decisionflow/v1/review_pb.js";
import { refusalOf } from "./refusal.js";

/** States waitForOutcome returns in: nothing more happens to the operation's effect on its own. */
export const SETTLED_STATES: ReadonlySet<OperationState> = new Set([
  OperationState.COMMITTED,
  OperationState.DECLINED,
  OperationState.REJECTED,
  OperationState.EXPIRED,
  OperationState.SUPERSEDED,
]);

/** The pause before the first reconnection (milliseconds); each next one doubles, up to the most. */
export const FIRST_BACKOFF_MS = 100;
export const MOST_BACKOFF_MS = 5_000;

/** What a watch yields: an event, or (when asked for) a heartbeat, the stream's position while nothing matched. */
export type WatchItem = { case: "event"; value: Event } | { case: "heartbeat"; value: Heartbeat };

/** A watch's filters (every one that is set must match) and how it runs. */
export interface WatchOptions {
  /** The index of the first event (0, the default: the log's first). Ignored with fromNow. */
  readonly startIndex?: bigint | number;
  /** Start at the end of the log: only events sequenced after the call. */
  readonly fromNow?: boolean;
  /** Only this case's events. An author (without the auditor or operator role) must name a case they
   * proposed in, or an operation of one. */
  readonly caseId?: string;
  /** Only this operation's events. */
  readonly operationId?: string;
  /** Only events of operations of this action. */
  readonly action?: string;
  /** Only events of these kinds; empty or absent for every kind. */
  readonly kinds?: readonly EventKind[];
  /** Yield the heartbeats too (the first message of every connection, then one every few seconds while
   * nothing matches); the cursor follows them either way. */
  readonly heartbeats?: boolean;
  /** Reconnect from the cursor when the stream breaks on a status that says to come back (the default). */
  readonly reconnect?: boolean;
  /** The caller's own cancellation: the watch ends, CANCELLED, and is never resumed. */
  readonly signal?: AbortSignal;
}

/** waitForOutcome's timeout passed before the operation settled; operation is its last answer. */
export class WaitTimedOut extends Error {
  override name = "WaitTimedOut";
  constructor(
    readonly operation: Operation,
    readonly timeoutMs: number,
    options?: ErrorOptions,
  ) {
    super(`${operation.operationId} is still ${OperationState[operation.state]} after ${timeoutMs} ms`, options);
  }
}

/** The WatchEvents request of a watch's filters. */
export function watchRequest(options: WatchOptions = {}): WatchEventsRequest {
  return create(WatchEventsRequestSchema, {
    startIndex: BigInt(options.startIndex ?? 0),
    fromNow: options.fromNow ?? false,
    caseId: options.caseId ?? "",
    operationId: options.operationId ?? "",
    action: options.action ?? "",
    kinds: [...(options.kinds ?? [])],
  });
}

/** Whether watchEvents reconnects after error: UNAVAILABLE, or a CANCELLED or ABORTED the caller did not ask
 * for (the server went away; Node's transport does not say UNAVAILABLE then). A watch is a read: resuming it
 * from its cursor repeats and skips nothing. */
export function resumedByWatchEvents(error: unknown, signal?: AbortSignal): boolean {
  const code = refusalOf(error).code;
  if (code === Code.Canceled || code === Code.Aborted) {
    return !(signal?.aborted ?? false);
  }
  return code === Code.Unavailable;
}

/** Every matching event from options.startIndex (or from now) on, in index order, following the log;
 * heartbeats too when asked. Reconnects from its cursor (see the module's comment) unless options.reconnect
 * is false; ends when the caller stops iterating (the stream is cancelled) or aborts options.signal. The
 * stream has no deadline: heartbeats keep it alive, and the client's timeoutMs does not apply to it. */
export async function* watchEvents(
  events: Client<typeof EventService>,
  options: WatchOptions = {},
): AsyncGenerator<WatchItem, void, undefined> {
  const request = watchRequest(options);
  const signal = options.signal;
  let backoff = FIRST_BACKOFF_MS;
  for (;;) {
    // One controller per connection: connect's stream iterator has no return(), so leaving the loop
    // (the caller stopped iterating) would leave the stream open without it.
    const connection = new AbortController();
    const unlink = linked(signal, connection);
    try {
      for await (const message of events.watchEvents(request, { signal: connection.signal, timeoutMs: 0 })) {
        const item = message.item;
        if (item.case === "event") {
          request.startIndex = item.value.index + 1n;
        } else if (item.case === "heartbeat") {
          request.startIndex = item.value.nextIndex;
        } else {
          continue; // a kind of message this client does not know: it moves no cursor
        }
        // From the first message on the stream resumes from its own position, never "from now" again.
        request.fromNow = false;
        backoff = FIRST_BACKOFF_MS;
        if (options.heartbeats || item.case === "event") {
          yield item;
        }
      }
      return; // the server ended the stream: it never does while serving
    } catch (error) {
      if (options.reconnect === false || !resumedByWatchEvents(error, signal)) {
        throw error;
      }
      await pause(backoff, signal);
      backoff = Math.min(MOST_BACKOFF_MS, backoff * 2);
    } finally {
      unlink();
      connection.abort();
    }
  }
}

/** The operation, as GetOperation answers it, once it is settled (see the module's comment); WaitTimedOut,
 * with the last answer, after timeoutMs. reviews and events reach the same orchestrator with credentials
 * that may call GetOperation and WatchEvents on the operation's case: an author of it, an auditor or an
 * operator. Each read is retried as withRetries retries (within the time left); any other failure is
 * thrown as it came, and aborting signal ends the wait (CANCELLED). */
export async function waitForOutcome(
  reviews: Client<typeof ReviewService>,
  events: Client<typeof EventService>,
  operationId: string,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<Operation> {
  const until = Date.now() + timeoutMs;
  const read = async (bound?: AbortSignal): Promise<Operation> => {
    const policy = { ...CLIENT_DEFAULT, maxTotalMs: Math.max(1, until - Date.now()) };
    const answer = await withRetries(() => reviews.getOperation({ operationId }, { signal: bound }), policy, bound);
    if (answer.operation === undefined) {
      throw new Error(`GetOperation answered ${operationId} without the operation`);
    }
    return answer.operation;
  };
  let operation = await read(signal);
  if (SETTLED_STATES.has(operation.state)) {
    return operation;
  }
  // The timeout aborts the stream and the reads in flight alike; the caller's signal does too.
  const expiry = new AbortController();
  const unlink = linked(signal, expiry);
  let expired = false;
  const timer = setTimeout(
    () => {
      expired = true;
      expiry.abort();
    },
    Math.max(0, until - Date.now()),
  );
  const watch = { fromNow: true, caseId: operation.caseId, heartbeats: true, signal: expiry.signal };
  const stream = watchEvents(events, watch);
  let opened = false;
  try {
    for await (const item of stream) {
      if (item.case === "heartbeat") {
        if (opened) {
          continue;
        }
        opened = true; // the stream's first message: read the operation again now
      } else if (!concerns(item.value, operation)) {
        continue;
      }
      operation = await read(expiry.signal);
      if (SETTLED_STATES.has(operation.state)) {
        return operation;
      }
    }
  } catch (error) {
    if (expired && !(signal?.aborted ?? false)) {
      throw new WaitTimedOut(operation, timeoutMs, { cause: error });
    }
    throw error;
  } finally {
    clearTimeout(timer);
    unlink();
  }
  throw new WaitTimedOut(operation, timeoutMs);
}

function concerns(event: Event, operation: Operation): boolean {
  // The operation's own events, and any proposal of its case (a replacement supersedes it).
  return event.operationId === operation.operationId || event.kind === EventKind.PROPOSAL;
}

/** Abort target when source aborts; returns what undoes the link. */
function linked(source: AbortSignal | undefined, target: AbortController): () => void {
  if (source === undefined) {
    return () => {};
  }
  if (source.aborted) {
    target.abort(source.reason);
    return () => {};
  }
  const abort = () => target.abort(source.reason);
  source.addEventListener("abort", abort, { once: true });
  return () => source.removeEventListener("abort", abort);
}

/** Wait ms milliseconds, or less once signal aborts (the next call then ends CANCELLED at once). */
function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
