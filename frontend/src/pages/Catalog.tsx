// Datasets and the model registry, read side: lists with their versions (expand a row).
// Uploads, diffs and the lineage graph come next (docs/ui.md).
import { Table, Tag, Typography } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { EmptyState, ErrorState, fmtTime } from "../components/common";

const size = (n: number) =>
  n >= 1e9 ? `${(n / 1e9).toFixed(1)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`;

function DatasetVersions({ id }: { id: string }) {
  const { t } = useI18n();
  const q = useQuery({
    queryKey: ["dataset-versions", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/datasets/{dataset_pk}/versions/", { params: { path: { dataset_pk: id }, query: { page_size: 100 } } }))
        .results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  return (
    <Table<Schemas["DatasetVersion"]>
      rowKey="id"
      size="small"
      pagination={false}
      loading={q.isLoading}
      dataSource={q.data}
      columns={[
        { title: "#", dataIndex: "number" },
        { title: t("common.state"), dataIndex: "state", render: (s: string) => <Tag>{s}</Tag> },
        { title: t("catalog.files"), dataIndex: "file_count" },
        { title: t("catalog.size"), dataIndex: "size_bytes", render: size },
        { title: "sha256", dataIndex: "manifest_sha256", render: (s: string) => <code>{s?.slice(0, 12)}</code> },
        { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
      ]}
    />
  );
}

export function DatasetsPage() {
  const { t } = useI18n();
  const { tenant, project } = useSession();
  const q = useQuery({
    queryKey: ["datasets", tenant?.id, project],
    enabled: !!tenant,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/datasets/", { params: { query: { project: project ?? undefined, page_size: 200 } } }))
        .results.filter((d) => d.tenant === tenant!.id),
  });
  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>
        {t("nav.datasets")}
      </Typography.Title>
      {q.error ? (
        <ErrorState error={q.error} onRetry={() => q.refetch()} />
      ) : (
        <Table<Schemas["Dataset"]>
          rowKey="id"
          size="small"
          loading={q.isLoading}
          dataSource={q.data}
          locale={{ emptyText: <EmptyState>{t("catalog.emptyDatasets")}</EmptyState> }}
          expandable={{ expandedRowRender: (d) => <DatasetVersions id={d.id} /> }}
          columns={[
            { title: t("common.name"), dataIndex: "name" },
            { title: t("common.project"), dataIndex: "project_slug" },
            { title: t("catalog.latest"), dataIndex: "latest_version" },
            { title: t("admin.description"), dataIndex: "description" },
            { title: t("common.user"), dataIndex: "created_by" },
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          ]}
        />
      )}
    </div>
  );
}

function ModelVersions({ id }: { id: string }) {
  const { t } = useI18n();
  const q = useQuery({
    queryKey: ["model-versions", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/{id}/versions/", { params: { path: { id }, query: { page_size: 100 } } })).results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  return (
    <Table<Schemas["ModelVersion"]>
      rowKey="id"
      size="small"
      pagination={false}
      loading={q.isLoading}
      dataSource={q.data}
      columns={[
        { title: "#", dataIndex: "number" },
        { title: t("common.state"), dataIndex: "state", render: (s: string) => <Tag>{s}</Tag> },
        { title: t("catalog.stage"), dataIndex: "stage" },
        { title: t("catalog.aliases"), dataIndex: "aliases", render: (a: string[]) => a.map((x) => <Tag key={x}>{x}</Tag>) },
        { title: "framework", dataIndex: "framework" },
        { title: t("catalog.files"), dataIndex: "file_count" },
        {
          title: t("job.title"),
          dataIndex: "source_job",
          render: (j: string | null) => (j ? <a href={`/jobs/${j}`}>{j.slice(0, 8)}</a> : "—"),
        },
      ]}
    />
  );
}

export function ModelsPage() {
  const { t } = useI18n();
  const { tenant, project } = useSession();
  const q = useQuery({
    queryKey: ["models", tenant?.id, project],
    enabled: !!tenant,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/", { params: { query: { project: project ?? undefined, page_size: 200 } } }))
        .results.filter((m) => m.tenant_id === tenant!.id),
  });
  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>
        {t("nav.models")}
      </Typography.Title>
      {q.error ? (
        <ErrorState error={q.error} onRetry={() => q.refetch()} />
      ) : (
        <Table<Schemas["RegisteredModel"]>
          rowKey="id"
          size="small"
          loading={q.isLoading}
          dataSource={q.data}
          locale={{ emptyText: <EmptyState>{t("catalog.emptyModels")}</EmptyState> }}
          expandable={{ expandedRowRender: (m) => <ModelVersions id={m.id} /> }}
          columns={[
            { title: t("common.name"), dataIndex: "name" },
            { title: t("common.project"), dataIndex: "project_slug" },
            { title: t("catalog.latest"), dataIndex: "latest_version" },
            {
              title: t("catalog.aliases"),
              dataIndex: "aliases",
              render: (a: Record<string, number>) =>
                Object.entries(a ?? {}).map(([k, v]) => <Tag key={k}>{`${k} → v${v}`}</Tag>),
            },
            { title: t("common.user"), dataIndex: "created_by" },
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          ]}
        />
      )}
    </div>
  );
}
