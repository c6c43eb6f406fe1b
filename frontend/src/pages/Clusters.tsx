// The platform's clusters (readable by everyone signed in; written by operators in /admin/):
// partitions, and nodes with their state, reason and accelerators in use; above them, the
// background builds `make up` has not finished (the S3 store, a cluster, the serving engine).
import { Alert, Card, Space, Table, Tag, Typography } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../api/client";
import { useI18n } from "../i18n";
import { EmptyState, ErrorState, Loading, fmtTime } from "../components/common";

const fmtAcc = (v: unknown) =>
  v && typeof v === "object"
    ? Object.entries(v as Record<string, number>)
        .map(([k, n]) => `${k}:${n}`)
        .join(" ")
    : "";

type Build = Schemas["Build"];
type T = ReturnType<typeof useI18n>["t"];

function buildLine(b: Build, t: T): string {
  const minutes = b.started ? Math.max(0, Math.floor((Date.now() - Date.parse(b.started)) / 60_000)) : 0;
  const key = b.state === "waiting" ? "clusters.buildWaiting" : b.state === "failed" ? "clusters.buildFailed" : "clusters.building";
  const line = t(key)
    .replace("{name}", b.name)
    .replace("{step}", String(b.step))
    .replace("{steps}", String(b.steps))
    .replace("{stepName}", b.step_name)
    .replace("{min}", String(minutes));
  return b.error ? `${line}: ${b.error}` : line;
}

// What is still being built in the background and how far (GET /api/v1/clusters/builds/).
function BuildsNotice({ builds }: { builds: Build[] }) {
  const { t } = useI18n();
  if (!builds.length) return null;
  const failed = builds.some((b) => b.state === "failed");
  return (
    <Alert
      data-testid="builds-notice"
      type={failed ? "error" : "info"}
      showIcon
      style={{ marginBottom: 16 }}
      message={t("clusters.buildsTitle")}
      description={
        <ul style={{ margin: 0, paddingLeft: 20 }}>
          {builds.map((b) => (
            <li key={b.name}>{buildLine(b, t)}</li>
          ))}
        </ul>
      }
    />
  );
}

export default function ClustersPage() {
  const { t } = useI18n();
  const builds = useQuery({
    queryKey: ["cluster-builds"],
    refetchInterval: 15_000,
    queryFn: async () => unwrap(await api.GET("/api/v1/clusters/builds/")).results,
  });
  const clusters = useQuery({
    queryKey: ["clusters"],
    refetchInterval: builds.data?.length ? 15_000 : false, // a build may register one
    queryFn: async () => unwrap(await api.GET("/api/v1/clusters/", { params: { query: { page_size: 100 } } })).results,
  });
  const nodes = useQuery({
    queryKey: ["nodes"],
    refetchInterval: 15_000,
    queryFn: async () => unwrap(await api.GET("/api/v1/nodes/", { params: { query: { page_size: 500 } } })).results,
  });
  if (clusters.isLoading) return <Loading />;
  if (clusters.error) return <ErrorState error={clusters.error} onRetry={() => clusters.refetch()} />;
  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>
        {t("nav.clusters")}
      </Typography.Title>
      <BuildsNotice builds={builds.data ?? []} />
      {!clusters.data?.length && <EmptyState />}
      {(clusters.data ?? []).map((c: Schemas["Cluster"]) => (
        <Card
          key={c.id}
          size="small"
          style={{ marginBottom: 16 }}
          title={
            <Space>
              {c.name} <Tag>{c.backend}</Tag>
              <Tag color={c.healthy ? "green" : "red"}>{c.healthy ? "healthy" : c.last_error || "unhealthy"}</Tag>
            </Space>
          }
          extra={`${t("clusters.synced")}: ${fmtTime(c.last_synced_at)}`}
        >
          <Typography.Paragraph>
            {t("clusters.partitions")}:{" "}
            {c.partitions.map((p) => (
              <Tag key={p.name}>
                {p.name}
                {p.is_default ? " *" : ""} · {p.state}
                {p.max_time_minutes ? ` · ${p.max_time_minutes} min` : ""}
              </Tag>
            ))}
          </Typography.Paragraph>
          <Table<Schemas["Node"]>
            rowKey="id"
            size="small"
            pagination={false}
            loading={nodes.isLoading}
            dataSource={(nodes.data ?? []).filter((n) => n.cluster === c.id || n.cluster === c.name)}
            columns={[
              { title: t("common.name"), dataIndex: "name" },
              { title: t("common.state"), dataIndex: "state", render: (s: string) => <Tag>{s}</Tag> },
              { title: t("clusters.reason"), dataIndex: "reason" },
              { title: "CPU", dataIndex: "cpus" },
              { title: "MiB", dataIndex: "memory_mb" },
              { title: t("clusters.accelerators"), render: (_, n) => `${fmtAcc(n.accelerators_in_use) || "0"} / ${fmtAcc(n.accelerators) || "0"}` },
            ]}
          />
        </Card>
      ))}
    </div>
  );
}
