// The decisionflow TypeScript client: generated messages and services, clients, refusals.

export * from "./client.js";
export * from "./refusal.js";
export * from "./gen/decisionflow/v1/common_pb.js";
export * from "./gen/decisionflow/v1/operations_pb.js";
export * from "./gen/decisionflow/v1/review_pb.js";
