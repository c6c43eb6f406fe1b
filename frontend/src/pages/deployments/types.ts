// The deployments API's shapes the pages read, from the generated schema. The usage answer is
// narrowed here until its component name stops clashing with the tenant usage's (asked of the
// API's owner in the serving contract).
import type { Schemas } from "../../api/client";

export type Deployment = Schemas["Deployment"];
export type DeploymentState = Schemas["DeploymentStateEnum"];
export type Replica = Schemas["Replica"];
export type DeploymentEvent = Schemas["DeploymentEvent"];
export type DeploymentKey = Schemas["DeploymentKey"];
export type DeploymentCreate = Schemas["DeploymentCreateRequest"];
/** The fit estimate a dry-run deploy answers (the deploy's own check, nothing written). */
export type FitEstimate = Schemas["FitEstimate"];

export const counts = (d: Deployment) => d.replicas;
export const resources = (d: Deployment) => d.resources;
export const limits = (d: Deployment) => d.limits;
export const versionNumber = (d: Deployment) => d.version.number;

export type UsagePoint = {
  t: string;
  requests: number;
  errors: number;
  requests_per_s: number;
  latency_p50_ms: number | null;
  latency_p95_ms: number | null;
  ttft_p50_ms: number | null;
  ttft_p95_ms: number | null;
  tokens_in_per_min: number;
  tokens_out_per_min: number;
};
export type Usage = {
  deployment: string;
  minutes: number;
  step_s: number;
  series: UsagePoint[];
  totals: {
    requests: number;
    errors: number;
    requests_per_s: number;
    latency_p50_ms: number | null;
    latency_p95_ms: number | null;
    tokens_in: number;
    tokens_out: number;
  };
};

export const DEPLOYMENT_STATES: DeploymentState[] = [
  "PENDING",
  "STARTING",
  "READY",
  "DEGRADED",
  "UPDATING",
  "IDLE",
  "FAILED",
  "STOPPED",
];

export const STATE_COLORS: Record<string, string> = {
  PENDING: "default",
  STARTING: "blue",
  READY: "success",
  DEGRADED: "warning",
  UPDATING: "processing",
  IDLE: "default",
  FAILED: "error",
  STOPPED: "default",
  UNHEALTHY: "error",
  DRAINING: "orange",
};

export const bytes = (n: number | null | undefined) => {
  if (n == null) return "—";
  const mib = n / 2 ** 20;
  return mib >= 1024 ? `${(mib / 1024).toFixed(2)} GiB` : `${mib.toFixed(1)} MiB`;
};

/** "tiny:3" or "tiny@production → v3": what a deployment serves. */
export const servedRef = (d: Deployment) => {
  const n = versionNumber(d);
  return d.follow_alias ? `${d.model_name}@${d.follow_alias} → v${n}` : `${d.model_name}:${n}`;
};
