// Failure signatures over time: jobs matched per week and signature, the last 8 weeks, from
// GET /api/v1/failure-signatures/stats/?since=&until= (one request a week, made together).
import { useMemo } from "react";
import { useQuery } from "@tanstack/react-query";
import dayjs from "dayjs";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { Chart, type ChartOption } from "../../components/Chart";
import { ErrorState } from "../../components/common";

export const WEEKS = 8;
type Stat = Schemas["SignatureStat"];

/** The starts of the last `n` weeks (Monday 00:00 local), oldest first, and the end of the last. */
export function weekBounds(now: dayjs.Dayjs, n = WEEKS): dayjs.Dayjs[] {
  const monday = now.startOf("day").subtract((now.day() + 6) % 7, "day");
  return Array.from({ length: n + 1 }, (_, i) => monday.subtract(n - 1 - i, "week"));
}

/** A stacked bar per signature (by name, of `names` only), a bar group per week. */
export function trendOption(starts: string[], weeks: Stat[][], names: string[]): ChartOption {
  return {
    animation: false,
    grid: { left: 40, right: 16, top: 28, bottom: 28 },
    tooltip: { trigger: "axis" },
    legend: { type: "scroll", top: 0 },
    xAxis: { type: "category", data: starts },
    yAxis: { type: "value", minInterval: 1 },
    series: names.map((name) => ({
      name,
      type: "bar",
      stack: "jobs",
      data: weeks.map((rows) => rows.find((r) => r.name === name)?.jobs ?? 0),
    })),
  };
}

export function SignatureTrend({ tenantId, names }: { tenantId: string; names: string[] }) {
  const { t } = useI18n();
  const bounds = useMemo(() => weekBounds(dayjs()), []);
  const q = useQuery({
    queryKey: ["signature-trend", tenantId, bounds[0].toISOString()],
    queryFn: async () =>
      Promise.all(
        bounds.slice(0, -1).map(async (start, i) =>
          unwrap(
            await api.GET("/api/v1/failure-signatures/stats/", {
              params: { query: { since: start.toISOString(), until: bounds[i + 1].toISOString() } },
            }),
          ).results,
        ),
      ),
  });
  if (q.error) return <ErrorState error={q.error} onRetry={() => q.refetch()} />;
  if (!q.data) return null;
  const starts = bounds.slice(0, -1).map((d) => d.format("MM-DD"));
  return <Chart label={t("admin.signatureTrend")} height={200} option={trendOption(starts, q.data, names)} />;
}
