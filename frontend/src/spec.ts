// The submit form's values <-> the job spec the API takes (JobSpecRequest), and the same spec
// as YAML, CLI and curl.
import YAML from "yaml";
import type { JobSpec } from "./api/client";

export type FormValues = {
  name: string;
  project?: string;
  kind: "training" | "inference" | string;
  cluster?: string; // empty: the project's, the tenant's or the platform's default
  command: string; // one argument per line, or one shell line
  working_dir?: string;
  env?: string; // KEY=value per line
  env_secrets?: Record<string, { secret: string }>; // env values that name a secret, kept as they are
  secrets?: string[]; // the project's secrets the job gets under their own names
  labels?: string;
  priority?: number;
  nodes?: number;
  tasks_per_node?: number;
  gpus_per_node?: number;
  gpu_type?: string;
  cpus_per_task?: number;
  memory?: string;
  time_limit?: string;
  partition?: string;
  env_type?: string;
  env_path?: string;
  env_image?: string;
  launcher?: string;
  max_restarts?: number;
  retry_on?: string[];
};

function parsePairs(text: string | undefined): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const line of (text ?? "").split("\n")) {
    const s = line.trim();
    if (!s) continue;
    const i = s.indexOf("=");
    if (i < 0) out[s] = "";
    else out[s.slice(0, i)] = s.slice(i + 1);
  }
  return Object.keys(out).length ? out : undefined;
}

const pairs = (o: unknown) =>
  o && typeof o === "object"
    ? Object.entries(o as Record<string, unknown>)
        .filter(([, v]) => typeof v !== "object" || v === null)
        .map(([k, v]) => `${k}=${v ?? ""}`)
        .join("\n")
    : "";

/** The env values that refer to a secret ({secret: NAME}): not text for the KEY=value field. */
const secretRefs = (o: unknown) => {
  const out: Record<string, { secret: string }> = {};
  for (const [k, v] of Object.entries((o ?? {}) as Record<string, unknown>))
    if (v && typeof v === "object" && typeof (v as { secret?: unknown }).secret === "string")
      out[k] = { secret: (v as { secret: string }).secret };
  return Object.keys(out).length ? out : undefined;
};

const intOrStr = (v: string | undefined) => (v && /^\d+$/.test(v) ? Number(v) : v || undefined);

function prune<T>(o: T): T {
  if (Array.isArray(o)) return o.map(prune) as T;
  if (o && typeof o === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(o)) {
      const p = prune(v);
      if (p === undefined || p === "" || p === null) continue;
      if (typeof p === "object" && !Array.isArray(p) && !Object.keys(p as object).length) continue;
      out[k] = p;
    }
    return out as T;
  }
  return o;
}

export function toSpec(v: FormValues): JobSpec {
  const lines = v.command
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
  return prune({
    project: v.project,
    name: v.name,
    kind: v.kind as JobSpec["kind"],
    cluster: v.cluster,
    command: lines.length === 1 ? lines[0] : lines,
    working_dir: v.working_dir,
    env: parsePairs(v.env) || v.env_secrets ? { ...parsePairs(v.env), ...v.env_secrets } : undefined,
    secrets: v.secrets?.length ? v.secrets : undefined,
    labels: parsePairs(v.labels),
    priority: v.priority,
    resources: {
      nodes: v.nodes,
      tasks_per_node: v.tasks_per_node,
      gpus_per_node: v.gpus_per_node,
      gpu_type: v.gpu_type,
      cpus_per_task: v.cpus_per_task,
      memory: intOrStr(v.memory),
      time_limit: intOrStr(v.time_limit),
      partition: v.partition,
    },
    environment:
      v.env_type && v.env_type !== "none"
        ? { type: v.env_type as never, path: v.env_path, image: v.env_image }
        : undefined,
    distributed: v.launcher && v.launcher !== "none" ? { launcher: v.launcher as never } : undefined,
    restart_policy:
      v.max_restarts != null || v.retry_on ? { max_restarts: v.max_restarts, retry_on: v.retry_on as never } : undefined,
  } as JobSpec);
}

export function fromSpec(spec: Partial<JobSpec> & Record<string, unknown>): FormValues {
  const r = (spec.resources ?? {}) as Record<string, unknown>;
  const e = (spec.environment ?? {}) as Record<string, string>;
  const rp = (spec.restart_policy ?? {}) as Record<string, unknown>;
  const d = (spec.distributed ?? {}) as Record<string, string>;
  return {
    name: String(spec.name ?? ""),
    project: spec.project as string | undefined,
    kind: String(spec.kind ?? "training"),
    cluster: (spec.cluster as string | undefined) ?? undefined,
    command: Array.isArray(spec.command) ? spec.command.join("\n") : String(spec.command ?? ""),
    working_dir: spec.working_dir as string | undefined,
    env: pairs(spec.env),
    env_secrets: secretRefs(spec.env),
    secrets: Array.isArray(spec.secrets) ? (spec.secrets as string[]) : undefined,
    labels: pairs(spec.labels),
    priority: spec.priority as number | undefined,
    nodes: r.nodes as number | undefined,
    tasks_per_node: r.tasks_per_node as number | undefined,
    gpus_per_node: r.gpus_per_node as number | undefined,
    gpu_type: (r.gpu_type as string) ?? undefined,
    cpus_per_task: r.cpus_per_task as number | undefined,
    memory: r.memory != null ? String(r.memory) : undefined,
    time_limit: r.time_limit != null ? String(r.time_limit) : undefined,
    partition: (r.partition as string) ?? undefined,
    env_type: e.type ?? "none",
    env_path: e.path,
    env_image: e.image,
    launcher: d.launcher ?? "none",
    max_restarts: rp.max_restarts as number | undefined,
    retry_on: rp.retry_on as string[] | undefined,
  };
}

export const toYaml = (spec: JobSpec) => YAML.stringify(spec);
export const fromYaml = (text: string) => YAML.parse(text) as JobSpec;

const shq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export function asCli(spec: JobSpec): string {
  return `torus submit - <<'EOF'\n${toYaml(spec)}EOF`;
}

export function asCurl(spec: JobSpec, origin: string): string {
  return [
    `curl -sS -X POST ${shq(`${origin}/api/v1/jobs/`)}`,
    `  -H "Authorization: Bearer $TORUS_TOKEN"`,
    `  -H 'Content-Type: application/json'`,
    `  -d ${shq(JSON.stringify(spec))}`,
  ].join(" \\\n");
}
