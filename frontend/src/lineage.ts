// A model version's lineage (GET .../lineage/) as graph nodes and links for ECharts:
// dataset versions -> attempts of the job -> the model version (docs/registry.md).
type Ref = { id: string; ref?: string; number?: number; state?: string; name?: string };
export type Lineage = {
  version: Ref;
  job: (Ref & { name: string }) | null;
  attempt: string | null;
  attempts: (Ref & { source?: boolean; dataset_versions?: string[] })[];
  dataset_versions: (Ref & { ref: string })[];
};
export type GraphNode = { id: string; name: string; category: number; x: number; y: number };
export type GraphLink = { source: string; target: string };

export const CATEGORIES = ["dataset", "attempt", "model"] as const;

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
  return { nodes: [...datasets, ...attempts, ...model], links };
}
