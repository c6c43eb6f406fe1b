// A model version's lineage (GET .../lineage/) as graph nodes and links for ECharts:
// dataset versions -> attempts of the job -> the model version -> the batch inference jobs
// that read it -> the dataset versions they wrote (docs/registry.md).
type Ref = { id: string; ref?: string; number?: number; state?: string; name?: string };
export type Lineage = {
  version: Ref;
  job: (Ref & { name: string }) | null;
  attempt: string | null;
  attempts: (Ref & { source?: boolean; dataset_versions?: string[] })[];
  dataset_versions: (Ref & { ref: string })[];
  inference_jobs?: (Ref & { name: string; output_dataset_versions: (Ref & { ref: string })[] })[];
};
export type GraphNode = { id: string; name: string; category: number; x: number; y: number };
export type GraphLink = { source: string; target: string };

export const CATEGORIES = ["dataset", "attempt", "model", "inference"] as const;

export function lineageGraph(l: Lineage): { nodes: GraphNode[]; links: GraphLink[] } {
  const col = (items: { id: string; name: string; category: number }[], x: number) =>
    items.map((n, i) => ({ ...n, x, y: (i - (items.length - 1) / 2) * 60 }));
  const datasets = col(
    l.dataset_versions.map((d) => ({ id: `d:${d.id}`, name: d.ref, category: 0 })),
    0,
  );
  const attempts = col(
    l.attempts.map((a) => ({ id: `a:${a.id}`, name: `${l.job?.name ?? "job"} #${a.number}${a.source ? " ★" : ""}`, category: 1 })),
    200,
  );
  const model = col([{ id: `m:${l.version.id}`, name: l.version.ref ?? l.version.id, category: 2 }], 400);
  const links: GraphLink[] = [];
  const known = new Set(datasets.map((d) => d.id));
  for (const a of l.attempts) {
    for (const dv of a.dataset_versions ?? []) if (known.has(`d:${dv}`)) links.push({ source: `d:${dv}`, target: `a:${a.id}` });
    if (a.source || a.id === l.attempt) links.push({ source: `a:${a.id}`, target: `m:${l.version.id}` });
  }
  // datasets named at registration, not read by any attempt: straight to the model
  const linked = new Set(links.map((k) => k.source));
  for (const d of datasets) if (!linked.has(d.id)) links.push({ source: d.id, target: `m:${l.version.id}` });
  // forward: the inference jobs that read this version, and what each wrote
  const jobs = l.inference_jobs ?? [];
  const inference = col(jobs.map((j) => ({ id: `i:${j.id}`, name: j.name, category: 3 })), 600);
  const outputs = col(
    jobs.flatMap((j) => j.output_dataset_versions.map((o) => ({ id: `o:${o.id}`, name: o.ref, category: 0 }))),
    800,
  );
  for (const j of jobs) {
    links.push({ source: `m:${l.version.id}`, target: `i:${j.id}` });
    for (const o of j.output_dataset_versions) links.push({ source: `i:${j.id}`, target: `o:${o.id}` });
  }
  return { nodes: [...datasets, ...attempts, ...model, ...inference, ...outputs], links };
}
