// One job (/jobs/:id): state and actions, the live log, metrics, the timeline of events and attempts.
import { useEffect, useMemo, useState } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { App, Alert, Button, Card, Descriptions, Input, Popconfirm, Space, Table, Tabs, Tag, Timeline, Tooltip, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type JobDetail, type Schemas } from "../api/client";
import { useI18n } from "../i18n";
import { roleAllows, useSession } from "../session";
import { ACTIVE_STATES, EmptyState, ErrorState, Loading, StateTag, fmtTime } from "../components/common";
import { LineStore, LogView } from "../components/LogView";
import { Chart } from "../components/Chart";
import { HitContext } from "../components/HitContext";
import { useJobSocket, type WsMessage } from "../components/useJobSocket";
import { startsIn } from "../startEstimate";

type Series = Record<string, [number, number][]>;

// usage samples (apps/logs/usage.py) are named system/...: their step is seconds since submission
const SYSTEM = "system/";
const part = (s: Series, system: boolean): Series =>
  Object.fromEntries(Object.entries(s).filter(([n]) => n.startsWith(SYSTEM) === system));

function MetricsChart({ series, label, xName = "step" }: { series: Series; label: string; xName?: string }) {
  const names = Object.keys(series).sort();
  const option = useMemo(
    () => ({
      animation: false,
      tooltip: { trigger: "axis" },
      legend: { data: names },
      grid: { left: 50, right: 20, top: 40, bottom: 50 },
      xAxis: { type: "value", name: xName },
      yAxis: { type: "value", scale: true },
      dataZoom: [{ type: "inside" }, { type: "slider" }],
      series: names.map((n) => ({ name: n, type: "line", showSymbol: false, data: series[n] })),
    }),
    [series, names, xName],
  );
  return <Chart option={option} height={320} label={label} />;
}

export default function JobPage() {
  const { id } = useParams<{ id: string }>();
  const [params] = useSearchParams();
  const { t } = useI18n();
  const { message } = App.useApp();
  const { me, tenants } = useSession();
  const qc = useQueryClient();
  // the job's lines, kept by the page: the socket may answer (a finished job: its whole log,
  // at once) before the job's details have loaded and the log view is drawn
  // eslint-disable-next-line react-hooks/exhaustive-deps -- a new store for each job
  const logLines = useMemo(() => new LineStore(), [id]);
  const [liveState, setLiveState] = useState<{ state: string; reason: string } | null>(null);
  const [skipped, setSkipped] = useState(0);
  const [series, setSeries] = useState<Series>({});
  const [tab, setTab] = useState(params.get("tab") ?? "logs");

  const job = useQuery({
    queryKey: ["job", id],
    queryFn: async () => unwrap(await api.GET("/api/v1/jobs/{id}/", { params: { path: { id: id! } } })),
  });
  // the job's tenant (through its project), for what the role may do
  const project = useQuery({
    queryKey: ["project", job.data?.project],
    enabled: !!job.data,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/projects/{id}/", { params: { path: { id: job.data!.project } } })),
  });
  const metrics = useQuery({
    queryKey: ["job-metrics", id],
    queryFn: async () => unwrap(await api.GET("/api/v1/jobs/{id}/metrics/", { params: { path: { id: id! } } })),
  });
  // another job's metrics beside this one's ("compare"), named "<metric> · <other job's name>"
  const [compareWith, setCompareWith] = useState<string | null>(null);
  const compare = useQuery({
    queryKey: ["job-compare", compareWith],
    enabled: !!compareWith,
    queryFn: async () => {
      const path = { id: compareWith! };
      const other = unwrap(await api.GET("/api/v1/jobs/{id}/", { params: { path } }));
      const m = unwrap(await api.GET("/api/v1/jobs/{id}/metrics/", { params: { path } }));
      const out: Series = {};
      for (const [name, points] of Object.entries(m.series))
        out[`${name} · ${other.name}`] = points.map((p) => [p.step, p.value]);
      return out;
    },
  });
  const otherSeries = compareWith ? (compare.data ?? {}) : {};
  useEffect(() => {
    if (!metrics.data) return;
    const s: Series = {};
    for (const [name, points] of Object.entries(metrics.data.series)) s[name] = points.map((p) => [p.step, p.value]);
    setSeries(s);
  }, [metrics.data]);

  useJobSocket(id, (m: WsMessage) => {
    switch (m.type) {
      case "backlog":
        logLines.clear();
        logLines.append(m.lines.map((l) => ({ ...l, attempt: l.attempt_number })));
        setLiveState({ state: m.state, reason: m.reason });
        break;
      case "lines":
        logLines.append(m.lines.map((l) => ({ ...l, attempt: l.attempt_number })));
        break;
      case "metrics":
        setSeries((prev) => {
          const next = { ...prev };
          for (const p of m.points) next[p.name] = [...(next[p.name] ?? []), [p.step, p.value]];
          return next;
        });
        break;
      case "state":
        setLiveState({ state: m.state, reason: m.reason });
        qc.invalidateQueries({ queryKey: ["job", id] });
        qc.invalidateQueries({ queryKey: ["jobs"] });
        break;
      case "skipped":
        setSkipped((n) => n + m.count);
        break;
    }
  }, { tail: 2000 });

  if (job.isLoading) return <Loading />;
  if (job.error) return <ErrorState error={job.error} onRetry={() => job.refetch()} />;
  const j = job.data as JobDetail;
  const state = liveState?.state ?? j.state;
  const reason = liveState?.reason ?? j.state_reason;
  const role = tenants.find((x) => x.id === project.data?.tenant_id)?.role ?? null;
  const mine = j.user === me?.user?.username;
  const mayAct = (action: string) =>
    roleAllows(role, "job", action) && (mine || roleAllows(role, "invitation", "create"));
  const active = ACTIVE_STATES.includes(state as never);
  const waiting = ["PENDING", "QUEUED"].includes(state);

  const act = async (action: "cancel" | "restart") => {
    const path = action === "cancel" ? "/api/v1/jobs/{id}/cancel/" : "/api/v1/jobs/{id}/restart/";
    try {
      unwrap(await api.POST(path, { params: { path: { id: j.id } } }));
      message.success(action === "cancel" ? t("job.cancel") : t("job.restart"));
      qc.invalidateQueries({ queryKey: ["job", id] });
    } catch (e) {
      message.error(String((e as Error).message));
    }
  };

  const attempts = j.attempts ?? [];
  const events = j.events ?? [];
  const signatures = (j.signatures ?? []) as unknown as { name: string }[];

  return (
    <div>
      <Space align="center" wrap style={{ marginBottom: 8 }}>
        <Typography.Title level={1} style={{ margin: 0, fontSize: 24 }} data-testid="job-name">
          {j.name}
        </Typography.Title>
        <StateTag state={state} />
        {signatures.map((s) => (
          <Tag color="red" key={s.name}>
            {s.name}
          </Tag>
        ))}
      </Space>
      {waiting && (
        <Alert
          type="info"
          showIcon
          data-testid="why-waiting"
          message={`${t("job.waiting")}: ${reason || state}`}
          description={
            [
              j.queue_position != null ? `${t("job.position")}: #${j.queue_position}` : "",
              startsIn(j.expected_start, Date.now(), t) ?? "",
            ]
              .filter(Boolean)
              .join(" · ") || undefined
          }
          action={
            j.expected_start?.basis ? (
              <Tooltip title={j.expected_start.basis}>
                <Typography.Text type="secondary" data-testid="start-basis">
                  {t("start.basis")}
                </Typography.Text>
              </Tooltip>
            ) : undefined
          }
          style={{ marginBottom: 12 }}
        />
      )}
      {!waiting && reason && <Typography.Paragraph type="secondary">{reason}</Typography.Paragraph>}
      <Space style={{ marginBottom: 12 }}>
        {active && mayAct("cancel") && (
          <Popconfirm title={t("job.cancel")} onConfirm={() => act("cancel")}>
            <Button danger>{t("job.cancel")}</Button>
          </Popconfirm>
        )}
        {!active && mayAct("restart") && <Button onClick={() => act("restart")}>{t("job.restart")}</Button>}
        {roleAllows(role, "job", "create") && (
          <Link to={`/jobs/new?from=${j.id}`}>
            <Button>{t("submit.resubmit")}</Button>
          </Link>
        )}
      </Space>
      <Tabs
        activeKey={tab}
        onChange={setTab}
        items={[
          {
            key: "logs",
            label: t("job.logs"),
            forceRender: true,
            children: (
              <>
                {skipped > 0 && (
                  <Alert type="warning" message={`${skipped} ${t("job.skipped")}`} style={{ marginBottom: 8 }} />
                )}
                {params.get("hit") && <HitContext id={params.get("hit")!} />}
                <LogView store={logLines} filename={`${j.name}.log`} />
              </>
            ),
          },
          {
            key: "metrics",
            label: t("job.metrics"),
            children: (
              <>
                <Input.Search
                  aria-label={t("job.compare")}
                  placeholder={t("job.compare")}
                  allowClear
                  onSearch={(v) => setCompareWith(v.trim() || null)}
                  style={{ width: 360, marginBottom: 8 }}
                />
                {compare.error && <ErrorState error={compare.error} />}
                {Object.keys(part(series, false)).length ? (
                  <MetricsChart series={part({ ...series, ...otherSeries }, false)} label={t("job.metrics")} />
                ) : (
                  <EmptyState>{t("job.noMetrics")}</EmptyState>
                )}
                {Object.keys(part(series, true)).length > 0 && (
                  <>
                    <Typography.Title level={5}>{t("job.resources")}</Typography.Title>
                    <MetricsChart
                      series={part({ ...series, ...otherSeries }, true)}
                      label={t("job.resources")}
                      xName="s"
                    />
                  </>
                )}
              </>
            ),
          },
          {
            key: "timeline",
            label: t("job.timeline"),
            children: (
              <>
                <Timeline
                  items={events.map((e: Schemas["JobEvent"]) => ({
                    color: e.to_state === "FAILED" ? "red" : e.to_state === "SUCCEEDED" ? "green" : "blue",
                    children: (
                      <span>
                        {fmtTime(e.created_at)} · #{e.attempt} {e.from_state || "∅"} → <b>{e.to_state}</b>
                        {e.reason ? ` · ${e.reason}` : ""}
                      </span>
                    ),
                  }))}
                />
                <Typography.Title level={4}>{t("job.attempts")}</Typography.Title>
                <Table
                  size="small"
                  rowKey="id"
                  pagination={false}
                  dataSource={attempts}
                  columns={[
                    { title: "#", dataIndex: "number" },
                    { title: t("common.state"), dataIndex: "state" },
                    { title: "backend", dataIndex: "backend_id" },
                    { title: "nodes", dataIndex: "nodes", render: (v: unknown) => (Array.isArray(v) ? v.join(", ") : "") },
                    { title: t("job.exitCode"), dataIndex: "exit_code" },
                    { title: "reason", dataIndex: "reason" },
                    { title: "start", dataIndex: "started_at", render: fmtTime },
                    { title: "end", dataIndex: "ended_at", render: fmtTime },
                  ]}
                />
              </>
            ),
          },
          {
            key: "overview",
            label: t("job.overview"),
            children: (
              <Card size="small">
                <Descriptions column={{ xs: 1, md: 2 }} size="small">
                  <Descriptions.Item label="id">{j.id}</Descriptions.Item>
                  <Descriptions.Item label={t("common.project")}>{j.project_slug}</Descriptions.Item>
                  <Descriptions.Item label={t("common.user")}>{j.user}</Descriptions.Item>
                  <Descriptions.Item label={t("submit.kind")}>{j.kind}</Descriptions.Item>
                  <Descriptions.Item label={t("job.resources")}>
                    {j.gpus} GPU · {j.cpus} CPU · {j.memory_mb} MiB
                  </Descriptions.Item>
                  <Descriptions.Item label={t("jobs.cluster")}>
                    {j.cluster} {j.partition}
                    {j.placement_reason && (
                      <Typography.Text type="secondary" data-testid="placement-reason">
                        {" "}
                        · {t("job.placedBecause")} {j.placement_reason}
                      </Typography.Text>
                    )}
                  </Descriptions.Item>
                  <Descriptions.Item label={t("common.created")}>{fmtTime(j.created_at)}</Descriptions.Item>
                  <Descriptions.Item label="started">{fmtTime(j.started_at)}</Descriptions.Item>
                  <Descriptions.Item label="finished">{fmtTime(j.finished_at)}</Descriptions.Item>
                  <Descriptions.Item label={t("job.exitCode")}>{j.exit_code ?? "—"}</Descriptions.Item>
                  <Descriptions.Item label="checkpoint">{j.latest_checkpoint || "—"}</Descriptions.Item>
                  <Descriptions.Item label="restarts">{j.restart_count}</Descriptions.Item>
                </Descriptions>
              </Card>
            ),
          },
        ]}
      />
    </div>
  );
}
