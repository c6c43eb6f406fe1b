// The platform's clusters (readable by everyone signed in; written by operators in /admin/):
// partitions, and nodes with their state, reason and accelerators in use.
import { Card, Space, Table, Tag, Typography } from "antd";
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

export default function ClustersPage() {
  const { t } = useI18n();
  const clusters = useQuery({
    queryKey: ["clusters"],
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
