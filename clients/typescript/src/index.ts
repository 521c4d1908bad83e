// The decisionflow TypeScript client: generated messages and services, clients, the event feed's watch,
// refusals, and the audit log's inclusion proofs checked offline.

export * from "./client.js";
export * from "./events.js";
export * from "./progress.js";
export * from "./refusal.js";
export * from "./transparency.js";
export * from "./gen/decisionflow/v1/audit_pb.js";
export * from "./gen/decisionflow/v1/common_pb.js";
export * from "./gen/decisionflow/v1/events_pb.js";
export * from "./gen/decisionflow/v1/operations_pb.js";
export * from "./gen/decisionflow/v1/review_pb.js";
