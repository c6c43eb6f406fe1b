// The deployments of the chosen tenant (and project): state, what each serves, replicas ready
// of desired, the request rate of the last 5 minutes; filters by name and state in the URL,
// and the archived ones instead with "Show archived" (restored there by an admin).
import { Link, useNavigate, useSearchParams } from "react-router-dom";
import { Button, Input, Select, Space, Table, Typography } from "antd";
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { EmptyState, ErrorState, fmtTime } from "../../components/common";
import { NameWithBadge, RestoreButton, ShowArchived, useMayArchive } from "../../components/Archive";
import { DeploymentStateTag, useUsage } from "./parts";
import { DEPLOYMENT_STATES, counts, servedRef, type Deployment, type DeploymentState } from "./types";

function RequestRate({ id }: { id: string }) {
  const usage = useUsage(id, 5, 30_000);
  if (!usage.data) return <span>—</span>;
  return <span data-testid="deployment-rate">{usage.data.totals.requests_per_s.toFixed(2)}</span>;
}

export default function DeploymentsPage() {
  const { t } = useI18n();
  const { tenant, project, can } = useSession();
  const [params, setParams] = useSearchParams();
  const nav = useNavigate();
  const name = params.get("name") ?? "";
  const state = params.get("state") ?? "";
  const archived = params.get("archived") === "true";
  const setFilter = (key: string, value: string) => {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value);
    else next.delete(key);
    setParams(next, { replace: true });
  };
  const query = {
    tenant: tenant?.id,
    project: project ?? undefined,
    name: name || undefined,
    state: (state || undefined) as DeploymentState | undefined,
    archived: archived || undefined,
    ordering: "name",
    page_size: 200,
  };
  const list = useQuery({
    queryKey: ["deployments", "list", query],
    enabled: !!tenant,
    placeholderData: keepPreviousData,
    refetchInterval: 10_000,
    queryFn: async () => unwrap(await api.GET("/api/v1/deployments/", { params: { query } })),
  });
  const rows = list.data?.results ?? [];
  const mayDeploy = can("deployment", "create");
  const mayArchive = useMayArchive();

  const columns = [
    {
      title: t("common.name"),
      dataIndex: "name",
      render: (_: unknown, d: Deployment) => (
        <NameWithBadge name={<Link to={`/deployments/${d.id}`}>{d.name}</Link>} archivedAt={d.archived_at} />
      ),
    },
    { title: t("common.project"), dataIndex: "project_slug" },
    {
      title: t("common.state"),
      dataIndex: "state",
      render: (_: unknown, d: Deployment) => (
        <span title={d.state_reason || undefined}>
          <DeploymentStateTag state={d.state} />
        </span>
      ),
    },
    { title: t("dep.model"), key: "model", render: (_: unknown, d: Deployment) => <code>{servedRef(d)}</code> },
    {
      title: t("dep.replicasReady"),
      key: "replicas",
      render: (_: unknown, d: Deployment) => (
        <span data-testid="deployment-replicas">
          {counts(d).ready} / {counts(d).desired}
        </span>
      ),
    },
    { title: t("dep.rate"), key: "rate", render: (_: unknown, d: Deployment) => <RequestRate id={d.id} /> },
    { title: t("dep.lastRequest"), dataIndex: "last_request_at", render: (v: string | null) => fmtTime(v) },
    { title: t("common.created"), dataIndex: "created_at", render: (v: string) => fmtTime(v) },
    ...(archived && mayArchive("deployment", "restore")
      ? [
          {
            title: t("common.actions"),
            key: "actions",
            render: (_: unknown, d: Deployment) => <RestoreButton kind="deployment" id={d.id} name={d.name} size="small" />,
          },
        ]
      : []),
  ];

  return (
    <div>
      <Space style={{ width: "100%", justifyContent: "space-between" }}>
        <Typography.Title level={1} style={{ fontSize: 24 }}>
          {t("dep.title")}
        </Typography.Title>
        {mayDeploy && (
          <Button type="primary" data-testid="deploy-button" onClick={() => nav("/deployments/new")}>
            {t("dep.deploy")}
          </Button>
        )}
      </Space>
      <Space wrap style={{ marginBottom: 12 }}>
        <Input.Search
          aria-label={t("dep.filterName")}
          placeholder={t("dep.filterName")}
          defaultValue={name}
          allowClear
          onSearch={(v) => setFilter("name", v)}
          style={{ width: 200 }}
        />
        <Select
          aria-label={t("dep.filterState")}
          data-testid="deployments-state-filter"
          allowClear
          placeholder={t("dep.filterState")}
          value={state || undefined}
          onChange={(v?: string) => setFilter("state", v ?? "")}
          options={DEPLOYMENT_STATES.map((s) => ({ value: s, label: s }))}
          style={{ minWidth: 160 }}
        />
        <ShowArchived checked={archived} onChange={(v) => setFilter("archived", v ? "true" : "")} />
      </Space>
      {list.error ? (
        <ErrorState error={list.error} onRetry={() => list.refetch()} />
      ) : (
        <Table<Deployment>
          rowKey="id"
          size="small"
          loading={list.isLoading}
          dataSource={rows}
          columns={columns}
          pagination={{ pageSize: 25, hideOnSinglePage: true }}
          locale={{
            emptyText: (
              <EmptyState>
                <span data-testid="deployments-empty">
                  {archived
                    ? t("archive.empty")
                    : name || state
                      ? t("dep.emptyFiltered")
                      : mayDeploy
                        ? t("dep.empty")
                        : t("dep.emptyViewer")}
                </span>
              </EmptyState>
            ),
          }}
        />
      )}
    </div>
  );
}
