// Datasets and the model registry, read side: lists with their versions (expand a row).
// Datasets: upload files or a directory into a new version (with progress) and diff two versions.
// Models: a version's lineage as a graph, and alias moves for roles that may (policy.json).
import { useRef, useState, type ReactNode } from "react";
import type { ColumnsType } from "antd/es/table";
import { Alert, Button, Input, InputNumber, List, Popconfirm, Progress, Space, Table, Tag, Typography } from "antd";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { Chart } from "../components/Chart";
import { CATEGORIES, lineageGraph, type Lineage } from "../lineage";
import { relPath, uploadVersion } from "../datasetUpload";
import { api, unwrap, type Schemas } from "../api/client";
import { useI18n, type Key } from "../i18n";
import { useSession } from "../session";
import { EmptyState, ErrorState, fmtTime } from "../components/common";
import { ArchiveButton, NameWithBadge, RestoreButton, ShowArchived, useMayArchive } from "../components/Archive";

const size = (n: number) =>
  n >= 1e9 ? `${(n / 1e9).toFixed(1)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`;

/** Upload files or a directory as a version. An upload that stopped (network, closed tab)
 * leaves its version open: picking the same files again resumes it (datasetUpload.ts). */
function DatasetUpload({ id, open }: { id: string; open: number | null }) {
  const { t } = useI18n();
  const qc = useQueryClient();
  const filesRef = useRef<HTMLInputElement>(null);
  const dirRef = useRef<HTMLInputElement>(null);
  const [progress, setProgress] = useState<number | null>(null);
  const [done, setDone] = useState<number | null>(null);
  const [error, setError] = useState<unknown>(null);
  const refresh = () => {
    qc.invalidateQueries({ queryKey: ["dataset-versions", id] });
    qc.invalidateQueries({ queryKey: ["datasets"] });
  };
  const discard = useMutation({
    mutationFn: async (n: number) =>
      unwrap(
        await api.DELETE("/api/v1/datasets/{dataset_pk}/versions/{number}/", {
          params: { path: { dataset_pk: id, number: String(n) } },
        }),
      ),
    onSuccess: refresh,
    onError: setError,
  });
  const start = async (list: FileList | null) => {
    if (!list || list.length === 0) return;
    const files = Array.from(list).map((f) => ({ path: relPath(f), blob: f as Blob }));
    setError(null);
    setDone(null);
    try {
      const n = await uploadVersion(id, files, (sent, total) => setProgress(total ? Math.floor((sent * 100) / total) : 100));
      setDone(n);
    } catch (e) {
      setError(e);
    } finally {
      setProgress(null);
      refresh();
    }
  };
  const busy = progress !== null;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      {open !== null && !busy && (
        <Alert
          type="warning"
          showIcon
          data-testid="upload-unfinished"
          message={t("catalog.unfinished").replace("{n}", String(open))}
          action={
            <Button size="small" danger loading={discard.isPending} onClick={() => discard.mutate(open)}>
              {t("catalog.discard")}
            </Button>
          }
        />
      )}
      <Space>
        <input
          ref={filesRef}
          type="file"
          multiple
          hidden
          aria-label={t("catalog.uploadFiles")}
          data-testid="upload-files"
          onChange={(e) => {
            start(e.target.files);
            e.target.value = ""; // the same files may be picked again to resume
          }}
        />
        <input
          ref={dirRef}
          type="file"
          multiple
          hidden
          aria-label={t("catalog.uploadDir")}
          {...({ webkitdirectory: "" } as object)}
          onChange={(e) => {
            start(e.target.files);
            e.target.value = "";
          }}
        />
        <Button disabled={busy} onClick={() => filesRef.current?.click()}>
          {open !== null ? t("catalog.resumeFiles") : t("catalog.uploadFiles")}
        </Button>
        <Button disabled={busy} onClick={() => dirRef.current?.click()}>
          {open !== null ? t("catalog.resumeDir") : t("catalog.uploadDir")}
        </Button>
      </Space>
      {busy && <Progress percent={progress} aria-label={t("catalog.uploading")} data-testid="upload-progress" />}
      {done !== null && <Alert type="success" showIcon message={t("catalog.uploaded").replace("{n}", String(done))} />}
      {error !== null && (
        <>
          <ErrorState error={error} />
          <Typography.Text type="secondary" data-testid="upload-resume-hint">
            {t("catalog.resumeHint")}
          </Typography.Text>
        </>
      )}
    </Space>
  );
}

function DatasetCompare({ id, latest }: { id: string; latest: number }) {
  const { t } = useI18n();
  const [a, setA] = useState<number | null>(latest > 1 ? latest - 1 : null);
  const [b, setB] = useState<number | null>(latest > 1 ? latest : null);
  const [pair, setPair] = useState<[number, number] | null>(null);
  const q = useQuery({
    queryKey: ["dataset-compare", id, pair],
    enabled: !!pair,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/datasets/{id}/compare/", { params: { path: { id }, query: { a: pair![0], b: pair![1] } } })),
  });
  const section = (title: string, color: string, paths: string[]) =>
    paths.length > 0 && (
      <List
        size="small"
        header={<strong>{`${title} (${paths.length})`}</strong>}
        dataSource={paths}
        renderItem={(p) => (
          <List.Item>
            <Tag color={color}>{title}</Tag>
            <code>{p}</code>
          </List.Item>
        )}
      />
    );
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Space>
        <InputNumber min={1} value={a} onChange={setA} aria-label={t("catalog.compareA")} data-testid="compare-a" />
        <InputNumber min={1} value={b} onChange={setB} aria-label={t("catalog.compareB")} data-testid="compare-b" />
        <Button disabled={!a || !b} onClick={() => a && b && setPair([a, b])} data-testid="compare-go">
          {t("catalog.compare")}
        </Button>
      </Space>
      {q.error ? (
        <ErrorState error={q.error} />
      ) : (
        q.data && (
          <div data-testid="compare-result">
            {section(t("catalog.added"), "green", q.data.added)}
            {section(t("catalog.removed"), "red", q.data.removed)}
            {section(t("catalog.changed"), "orange", q.data.changed)}
            <Typography.Text>{t("catalog.unchanged").replace("{n}", String(q.data.unchanged))}</Typography.Text>
          </div>
        )
      )}
    </Space>
  );
}

function DatasetVersions({ id, latest }: { id: string; latest: number }) {
  const { t } = useI18n();
  const { can } = useSession();
  const q = useQuery({
    queryKey: ["dataset-versions", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/datasets/{dataset_pk}/versions/", { params: { path: { dataset_pk: id }, query: { page_size: 100 } } }))
        .results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      {can("dataset", "upload") && can("dataset", "commit") && (
        <DatasetUpload id={id} open={q.data?.find((v) => v.state === "open")?.number ?? null} />
      )}
      <DatasetCompare id={id} latest={latest} />
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
    </Space>
  );
}

/** A catalogue page: the tenant's rows (the chosen project's), each expandable; the archived
 * ones instead with "Show archived". */
function CatalogPage<T extends { id: string; name: string; tenant?: string; tenant_id?: string; archived_at?: string | null }>({
  kind,
  title,
  empty,
  queryKey,
  fetch,
  expanded,
  columns,
}: {
  kind: "dataset" | "model";
  title: Key;
  empty: Key;
  queryKey: string;
  fetch: (project: string | undefined, archived: boolean) => Promise<T[]>;
  expanded: (row: T) => ReactNode;
  columns: ColumnsType<T>;
}) {
  const { t } = useI18n();
  const { tenant, project } = useSession();
  const mayArchive = useMayArchive();
  const [archived, setArchived] = useState(false);
  const q = useQuery({
    queryKey: [queryKey, tenant?.id, project, archived],
    enabled: !!tenant,
    queryFn: async () =>
      (await fetch(project ?? undefined, archived)).filter((x) => (x.tenant ?? x.tenant_id) === tenant!.id),
  });
  const actions = mayArchive(kind) || mayArchive(kind, "restore");
  return (
    <div>
      <Space style={{ width: "100%", justifyContent: "space-between" }}>
        <Typography.Title level={1} style={{ fontSize: 24 }}>
          {t(title)}
        </Typography.Title>
        <ShowArchived checked={archived} onChange={setArchived} />
      </Space>
      {q.error ? (
        <ErrorState error={q.error} onRetry={() => q.refetch()} />
      ) : (
        <Table<T>
          rowKey="id"
          size="small"
          loading={q.isLoading}
          dataSource={q.data}
          locale={{ emptyText: <EmptyState>{t(archived ? "archive.empty" : empty)}</EmptyState> }}
          expandable={{ expandedRowRender: expanded }}
          columns={[
            {
              title: t("common.name"),
              dataIndex: "name",
              render: (n: string, row) => <NameWithBadge name={n} archivedAt={row.archived_at} />,
            },
            { title: t("common.project"), dataIndex: "project_slug" },
            { title: t("catalog.latest"), dataIndex: "latest_version" },
            ...columns,
            { title: t("common.user"), dataIndex: "created_by" },
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
            ...(actions
              ? [
                  {
                    title: t("common.actions"),
                    key: "actions",
                    render: (_: unknown, row: T) =>
                      row.archived_at
                        ? mayArchive(kind, "restore") && <RestoreButton kind={kind} id={row.id} name={row.name} size="small" />
                        : mayArchive(kind) && <ArchiveButton kind={kind} id={row.id} name={row.name} size="small" />,
                  },
                ]
              : []),
          ]}
        />
      )}
    </div>
  );
}

export function DatasetsPage() {
  const { t } = useI18n();
  return (
    <CatalogPage<Schemas["Dataset"]>
      kind="dataset"
      title="nav.datasets"
      empty="catalog.emptyDatasets"
      queryKey="datasets"
      fetch={async (project, archived) =>
        unwrap(
          await api.GET("/api/v1/datasets/", { params: { query: { project, page_size: 200, archived: archived || undefined } } }),
        ).results
      }
      expanded={(d) => <DatasetVersions id={d.id} latest={d.latest_version ?? 0} />}
      columns={[{ title: t("admin.description"), dataIndex: "description" }]}
    />
  );
}

function ModelLineage({ id, n }: { id: string; n: number }) {
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

function AliasMove({ id, n }: { id: string; n: number }) {
  const { t } = useI18n();
  const qc = useQueryClient();
  const [alias, setAlias] = useState("");
  const m = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.PUT("/api/v1/models/{id}/aliases/{alias}/", { params: { path: { id, alias } }, body: { version: n } }),
      ),
    onSuccess: () => {
      setAlias("");
      qc.invalidateQueries({ queryKey: ["model-versions", id] });
      qc.invalidateQueries({ queryKey: ["models"] });
    },
  });
  return (
    <Space>
      <Input
        size="small"
        value={alias}
        onChange={(e) => setAlias(e.target.value)}
        placeholder="production"
        aria-label={t("alias.name")}
        data-testid={`alias-${n}`}
        style={{ width: 120 }}
      />
      <Button size="small" disabled={!alias || m.isPending} onClick={() => m.mutate()} data-testid={`alias-move-${n}`}>
        {t("alias.move")}
      </Button>
      {m.error && <ErrorState error={m.error} />}
    </Space>
  );
}

/** An alias with a button that removes it (DELETE .../aliases/{alias}/, audited), confirmed. */
function AliasTag({ id, alias }: { id: string; alias: string }) {
  const { t } = useI18n();
  const qc = useQueryClient();
  const m = useMutation({
    mutationFn: async () =>
      unwrap(await api.DELETE("/api/v1/models/{id}/aliases/{alias}/", { params: { path: { id, alias } } })),
    onSuccess: () => {
      qc.invalidateQueries({ queryKey: ["model-versions", id] });
      qc.invalidateQueries({ queryKey: ["models"] });
    },
  });
  return (
    <Tag>
      {alias}
      <Popconfirm title={t("alias.remove")} onConfirm={() => m.mutate()}>
        <Button type="link" size="small" aria-label={`${t("alias.remove")}: ${alias}`} data-testid={`alias-remove-${alias}`}>
          ×
        </Button>
      </Popconfirm>
      {m.error && <ErrorState error={m.error} />}
    </Tag>
  );
}

function ModelVersions({ id }: { id: string }) {
  const { t } = useI18n();
  const { can } = useSession();
  const [shown, setShown] = useState<number | null>(null);
  const q = useQuery({
    queryKey: ["model-versions", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/{id}/versions/", { params: { path: { id }, query: { page_size: 100 } } })).results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Table<Schemas["ModelVersionRow"]>
        rowKey="id"
        size="small"
        pagination={false}
        loading={q.isLoading}
        dataSource={q.data}
        columns={[
          { title: "#", dataIndex: "number" },
          { title: t("common.state"), dataIndex: "state", render: (s: string) => <Tag>{s}</Tag> },
          { title: t("catalog.stage"), dataIndex: "stage" },
          {
            title: t("catalog.aliases"),
            dataIndex: "aliases",
            render: (a: string[]) =>
              a.map((x) => (can("model", "alias") ? <AliasTag key={x} id={id} alias={x} /> : <Tag key={x}>{x}</Tag>)),
          },
          { title: "framework", dataIndex: "framework" },
          { title: t("catalog.files"), dataIndex: "file_count" },
          {
            title: t("job.title"),
            dataIndex: "source_job",
            render: (j: string | null) => (j ? <a href={`/jobs/${j}`}>{j.slice(0, 8)}</a> : "—"),
          },
          {
            title: t("lineage.title"),
            dataIndex: "number",
            key: "lineage",
            render: (n: number) => (
              <Button size="small" onClick={() => setShown(shown === n ? null : n)} data-testid={`lineage-${n}`}>
                {t("lineage.show")}
              </Button>
            ),
          },
          ...(can("model", "alias")
            ? [{ title: t("alias.move"), dataIndex: "number", key: "alias", render: (n: number) => <AliasMove id={id} n={n} /> }]
            : []),
        ]}
      />
      {shown !== null && <ModelLineage id={id} n={shown} />}
      <AliasHistory id={id} />
    </Space>
  );
}

/** Every move of the model's aliases, newest first (from the audit log). */
function AliasHistory({ id }: { id: string }) {
  const { t } = useI18n();
  const q = useQuery({
    queryKey: ["model-versions", id, "alias-history"],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/{id}/alias-history/", { params: { path: { id } } })),
  });
  if (q.error) return <ErrorState error={q.error} />;
  if (!q.data?.length) return null;
  const v = (n: number | null | undefined) => (n == null ? "—" : `v${n}`);
  return (
    <Table
      rowKey={(m) => `${m.at}-${m.alias}`}
      size="small"
      pagination={false}
      title={() => t("alias.history")}
      dataSource={[...q.data].reverse()}
      columns={[
        { title: t("alias.name"), dataIndex: "alias" },
        { title: t("alias.moved"), key: "move", render: (_, m) => `${v(m.from_version)} → ${v(m.to_version)}` },
        { title: t("alias.by"), dataIndex: "actor" },
        { title: t("alias.at"), dataIndex: "at", render: fmtTime },
      ]}
    />
  );
}

export function ModelsPage() {
  const { t } = useI18n();
  return (
    <CatalogPage<Schemas["RegisteredModel"]>
      kind="model"
      title="nav.models"
      empty="catalog.emptyModels"
      queryKey="models"
      fetch={async (project, archived) =>
        unwrap(
          await api.GET("/api/v1/models/", { params: { query: { project, page_size: 200, archived: archived || undefined } } }),
        ).results
      }
      expanded={(m) => <ModelVersions id={m.id} />}
      columns={[
        {
          title: t("catalog.aliases"),
          dataIndex: "aliases",
          render: (a: Record<string, number>) => Object.entries(a ?? {}).map(([k, v]) => <Tag key={k}>{`${k} → v${v}`}</Tag>),
        },
      ]}
    />
  );
}
