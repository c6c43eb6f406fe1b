// A model version's lineage (datasets, jobs, versions) as a graph, and its edges as text.
import { useQuery } from "@tanstack/react-query";
import { Chart } from "../../components/Chart";
import { CATEGORIES, lineageGraph, type Lineage } from "../../lineage";
import { api, unwrap } from "../../api/client";
import { useI18n } from "../../i18n";
import { ErrorState } from "../../components/common";

export function ModelLineage({ id, n }: { id: string; n: number }) {
  const { t } = useI18n();
  const q = useQuery({
    queryKey: ["model-lineage", id, n],
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/models/{id}/versions/{number}/lineage/", { params: { path: { id, number: String(n) } } }),
      ) as unknown as Lineage,
  });
  if (q.error) return <ErrorState error={q.error} />;
  if (!q.data) return null;
  const g = lineageGraph(q.data);
  const names = Object.fromEntries(g.nodes.map((x) => [x.id, x.name]));
  const option = {
    tooltip: {},
    legend: { data: CATEGORIES.map((c) => t(`lineage.${c}` as "lineage.dataset")) },
    series: [
      {
        type: "graph",
        layout: "none",
        roam: true,
        label: { show: true, position: "bottom" },
        edgeSymbol: ["none", "arrow"],
        categories: CATEGORIES.map((c) => ({ name: t(`lineage.${c}` as "lineage.dataset") })),
        data: g.nodes,
        links: g.links,
      },
    ],
  };
  return (
    <div data-testid="lineage">
      <Chart option={option} height={Math.max(200, g.nodes.length * 40)} label={t("lineage.title")} />
      {/* the same edges as text, for screen readers and copying */}
      <ul aria-label={t("lineage.title")}>
        {g.links.map((k) => (
          <li key={`${k.source}-${k.target}`}>{`${names[k.source]} → ${names[k.target]}`}</li>
        ))}
      </ul>
    </div>
  );
}
