// A deployment's events timeline, newest first: each with the figures it carries (an autoscale
// decision's, in the order people read them).
import { Space, Tag, Timeline, Typography } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../../api/client";
import { useI18n } from "../../i18n";
import { EmptyState, ErrorState, Loading, fmtTime } from "../../components/common";
import type { DeploymentEvent } from "./types";

const EVENT_COLORS: Record<string, string> = {
  failed: "red",
  replica_unhealthy: "red",
  replica_replaced: "orange",
  scaled_up: "blue",
  scaled_down: "blue",
  scaled_to_zero: "gray",
  woken: "green",
  replica_ready: "green",
  rollout_done: "green",
};

// the figures an autoscale decision read, in the order people read them
const FIGURES = [
  "from",
  "to",
  "by",
  "requests_processing",
  "requests_deferred",
  "ready_replicas",
  "slots_per_replica",
  "target_per_slot",
  "idle_s",
  "cold_start_s",
  "version",
  "replicas",
];

/** An event's `data` as "name value" pairs (nested parts, such as each replica's metrics, as JSON). */
export function eventFigures(data: unknown): [string, string][] {
  if (!data || typeof data !== "object") return [];
  const entries = Object.entries(data as Record<string, unknown>);
  const rank = (k: string) => (FIGURES.includes(k) ? FIGURES.indexOf(k) : FIGURES.length);
  return entries
    .sort(([a], [b]) => rank(a) - rank(b))
    .map(([k, v]) => [k, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)]);
}

export function Events({ id }: { id: string }) {
  const { t } = useI18n();
  const events = useQuery({
    queryKey: ["deployment-events", id],
    refetchInterval: 5_000,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/deployments/{id}/events/", { params: { path: { id }, query: { page_size: 500 } } }))
        .results,
  });
  if (events.error) return <ErrorState error={events.error} onRetry={() => events.refetch()} />;
  if (!events.data) return <Loading />;
  if (!events.data.length) return <EmptyState />;
  const rows = [...events.data].sort((a, b) => b.created_at.localeCompare(a.created_at)); // newest first
  return (
    <Timeline
      data-testid="deployment-events"
      items={rows.map((e: DeploymentEvent) => ({
        color: EVENT_COLORS[e.kind] ?? "blue",
        children: (
          <div data-testid="deployment-event" data-kind={e.kind}>
            <Space wrap size={4}>
              <Typography.Text type="secondary">{fmtTime(e.created_at)}</Typography.Text>
              <Tag>{e.kind}</Tag>
              <span>{e.message}</span>
            </Space>
            {eventFigures(e.data).length > 0 && (
              <div style={{ fontSize: 12, marginTop: 2 }} title={t("dep.figures")}>
                {eventFigures(e.data).map(([k, v]) => (
                  <span key={k} style={{ marginRight: 12, overflowWrap: "anywhere" }}>
                    <Typography.Text type="secondary">{k}</Typography.Text> <code>{v}</code>
                  </span>
                ))}
              </div>
            )}
          </div>
        ),
      }))}
    />
  );
}
