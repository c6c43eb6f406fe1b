// GPUs allocated over time (GET /api/v1/usage/history/): one stacked area per tenant, project
// or user, the tenant's GPU quota as a line, buckets in UTC shown in the viewer's time zone.
import { useMemo, useState } from "react";
import { Segmented, Space, Typography } from "antd";
import { useQuery } from "@tanstack/react-query";
import dayjs from "dayjs";
import { api, unwrap, type Schemas } from "../api/client";
import { useI18n, type Key } from "../i18n";
import { Chart, type ChartOption } from "./Chart";
import { EmptyState, ErrorState } from "./common";

type Group = "tenant" | "project" | "user";
type Range = "1d" | "7d" | "30d" | "90d";
// each range with the bucket that keeps it to a readable number of points
const RANGES: Record<Range, { days: number; bucket: "hour" | "day" | "week" }> = {
  "1d": { days: 1, bucket: "hour" },
  "7d": { days: 7, bucket: "hour" },
  "30d": { days: 30, bucket: "day" },
  "90d": { days: 90, bucket: "day" },
};
const RANGE_LABELS: Record<Range, Key> = {
  "1d": "usage.range1d",
  "7d": "usage.range7d",
  "30d": "usage.range30d",
  "90d": "usage.range90d",
};
const GROUP_LABELS: Record<Group, Key> = { tenant: "usage.byTenant", project: "usage.byProject", user: "usage.byUser" };

export function seriesName(s: Schemas["HistorySeries"], group: Group): string {
  return (group === "project" ? s.project : group === "user" ? s.user : s.tenant) ?? s.tenant;
}

/** The chart's option: a stacked area per series, x the bucket starts in local time. */
export function historyOption(
  history: Schemas["History"],
  group: Group,
  quota: number | null,
  quotaLabel: string,
): ChartOption {
  const fmt = history.bucket === "hour" ? "MM-DD HH:mm" : "YYYY-MM-DD";
  const starts = (history.series[0]?.points ?? []).map((p) => dayjs(p.start).format(fmt));
  return {
    animation: false,
    grid: { left: 44, right: 16, top: 28, bottom: 28 },
    tooltip: { trigger: "axis" },
    legend: { type: "scroll", top: 0 },
    xAxis: { type: "category", data: starts, boundaryGap: false },
    yAxis: { type: "value", name: "GPUs" },
    series: [
      ...history.series.map((s) => ({
        name: seriesName(s, group),
        type: "line",
        stack: "gpus",
        areaStyle: {},
        symbol: "none",
        data: s.points.map((p) => p.gpus),
      })),
      ...(quota != null
        ? [{ name: quotaLabel, type: "line", symbol: "none", lineStyle: { type: "dashed" }, data: starts.map(() => quota) }]
        : []),
    ],
  };
}

export function UtilisationChart({
  tenantId,
  project,
  quota,
  groups = ["project", "user"],
  height = 220,
}: {
  tenantId: string;
  project?: string | null;
  quota: number | null;
  groups?: Group[];
  height?: number;
}) {
  const { t } = useI18n();
  const [range, setRange] = useState<Range>("30d");
  const [group, setGroup] = useState<Group>(groups[0]);
  const { days, bucket } = RANGES[range];
  const history = useQuery({
    queryKey: ["usage-history", tenantId, project ?? null, range, group],
    queryFn: async () => {
      const until = dayjs();
      return unwrap(
        await api.GET("/api/v1/usage/history/", {
          params: {
            query: {
              tenant: tenantId,
              project: project ?? undefined,
              since: until.subtract(days, "day").toISOString(),
              until: until.toISOString(),
              bucket,
              group_by: group,
            },
          },
        }),
      );
    },
  });
  const option = useMemo(
    () => (history.data ? historyOption(history.data, group, quota, t("usage.quota")) : null),
    [history.data, group, quota, t],
  );
  const total = (history.data?.series ?? []).reduce((s, x) => s + x.points.reduce((a, p) => a + p.gpu_hours, 0), 0);
  return (
    <div>
      <Space wrap style={{ marginBottom: 8 }}>
        <Segmented<Range>
          aria-label={t("usage.range")}
          value={range}
          onChange={setRange}
          options={(Object.keys(RANGES) as Range[]).map((r) => ({ value: r, label: t(RANGE_LABELS[r]) }))}
        />
        {groups.length > 1 && (
          <Segmented<Group>
            aria-label={t("usage.groupBy")}
            value={group}
            onChange={setGroup}
            options={groups.map((g) => ({ value: g, label: t(GROUP_LABELS[g]) }))}
          />
        )}
        {history.data && (
          <Typography.Text type="secondary" data-testid="usage-total">
            {t("usage.total")}: {total.toFixed(1)} GPU h
          </Typography.Text>
        )}
      </Space>
      {history.error ? (
        <ErrorState error={history.error} onRetry={() => history.refetch()} />
      ) : history.data && !history.data.series.length ? (
        <EmptyState>{t("usage.empty")}</EmptyState>
      ) : (
        option && <Chart label={t("usage.title")} height={height} option={option} />
      )}
    </div>
  );
}
