// One deployment: state and why, replicas and their jobs (live logs are on the job's page),
// traffic charts, the events timeline (autoscale decisions with the figures they read), keys;
// and, for roles that may, scale, change the version or alias, make and revoke keys, archive
// (the name typed) and restore.
import { useState } from "react";
import { Link, useNavigate, useParams } from "react-router-dom";
import {
  Alert,
  Button,
  Card,
  Descriptions,
  Form,
  Input,
  InputNumber,
  Select,
  Space,
  Table,
  Tabs,
  Tag,
  Typography,
} from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { EmptyState, ErrorState, Loading, fmtTime } from "../../components/common";
import { ConfirmButton, CreateModal, ShownOnce, useMutate } from "../admin/parts";
import { ArchiveButton, ArchivedTag, RestoreButton } from "../../components/Archive";
import { DeploymentStateTag, useDeploymentRole } from "./parts";
import { UsageCharts } from "./UsageCharts";
import { Events } from "./Events";
import {
  bytes,
  counts,
  limits,
  resources,
  servedRef,
  versionNumber,
  type Deployment,
  type DeploymentKey,
  type Replica,
} from "./types";

function Replicas({ id }: { id: string }) {
  const { t } = useI18n();
  const [all, setAll] = useState(false);
  const replicas = useQuery({
    queryKey: ["deployment-replicas", id, all],
    refetchInterval: 5_000,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/deployments/{id}/replicas/", {
          // `all` is not in the generated schema (a plain query flag)
          params: { path: { id }, query: { page_size: 200, ...(all ? { all: "1" } : {}) } as never },
        }),
      ).results,
  });
  if (replicas.error) return <ErrorState error={replicas.error} onRetry={() => replicas.refetch()} />;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Button size="small" onClick={() => setAll((v) => !v)} aria-pressed={all}>
        {all ? t("dep.replicasLive") : t("dep.replicasAll")}
      </Button>
      <Table<Replica>
        rowKey="id"
        size="small"
        loading={replicas.isLoading}
        dataSource={replicas.data ?? []}
        pagination={false}
        data-testid="replicas"
        locale={{ emptyText: <EmptyState>{t("dep.noReplicas")}</EmptyState> }}
        columns={[
          { title: "id", dataIndex: "id", render: (v: string) => <code>{v.slice(0, 8)}</code> },
          {
            title: t("common.state"),
            dataIndex: "state",
            render: (v: string, r) => (
              <span title={r.state_reason || undefined}>
                <DeploymentStateTag state={v} testId="replica-state" />
              </span>
            ),
          },
          { title: t("dep.version"), dataIndex: "version", render: (v: number) => `v${v}` },
          {
            title: t("dep.job"),
            dataIndex: "job",
            render: (v: string | null, r) =>
              v ? (
                <Link to={`/jobs/${v}`} data-testid="replica-job">
                  {r.job_state ?? v.slice(0, 8)}
                </Link>
              ) : (
                "—"
              ),
          },
          { title: t("dep.address"), key: "addr", render: (_: unknown, r) => (r.port ? `${r.host}:${r.port}` : "—") },
          { title: t("dep.readyAt"), dataIndex: "ready_at", render: fmtTime },
          { title: t("dep.lastOk"), dataIndex: "last_ok_at", render: fmtTime },
          { title: t("dep.failures"), dataIndex: "failures" },
          { title: t("dep.reason"), dataIndex: "state_reason" },
        ]}
      />
    </Space>
  );
}

function Keys({ d, may }: { d: Deployment; may: boolean }) {
  const { t } = useI18n();
  const [open, setOpen] = useState(false);
  const [created, setCreated] = useState<string | null>(null);
  const keys = useQuery({
    queryKey: ["deployment-keys", d.id],
    queryFn: async () =>
      // GET and POST share one operation, so its answer type is their union
      (
        unwrap(
          await api.GET("/api/v1/deployments/{id}/keys/", { params: { path: { id: d.id }, query: { page_size: 200 } } }),
        ) as Schemas["PaginatedDeploymentKeyList"]
      ).results,
  });
  const revoke = useMutate(
    async (key: string) =>
      unwrap(await api.DELETE("/api/v1/deployments/{id}/keys/{key_id}/", { params: { path: { id: d.id, key_id: key } } })),
    ["deployment-keys"],
  );
  const qc = useQueryClient();
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Typography.Paragraph type="secondary">
        {t("dep.keysHelp")} <Typography.Text code copyable>{`${window.location.origin}${d.gateway}`}</Typography.Text>
      </Typography.Paragraph>
      <ShownOnce value={created} onClose={() => setCreated(null)} message="dep.keyCreated" testId="key-token" />
      {may && (
        <Button onClick={() => setOpen(true)} data-testid="key-create">
          {t("dep.newKey")}
        </Button>
      )}
      {keys.error ? (
        <ErrorState error={keys.error} onRetry={() => keys.refetch()} />
      ) : (
        <Table<DeploymentKey>
          rowKey="id"
          size="small"
          loading={keys.isLoading}
          dataSource={keys.data ?? []}
          pagination={false}
          locale={{ emptyText: <EmptyState>{t("dep.noKeys")}</EmptyState> }}
          columns={[
            { title: t("common.name"), dataIndex: "name" },
            { title: "prefix", dataIndex: "prefix", render: (p: string) => <code>{p}…</code> },
            { title: t("common.user"), dataIndex: "created_by" },
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
            {
              title: t("dep.revoked"),
              dataIndex: "revoked_at",
              render: (v: string | null) => (v ? fmtTime(v) : <Tag color="green">{t("admin.active")}</Tag>),
            },
            ...(may
              ? [
                  {
                    title: t("common.actions"),
                    key: "actions",
                    render: (_: unknown, k: DeploymentKey) =>
                      !k.revoked_at && <ConfirmButton label="common.revoke" onConfirm={() => revoke.mutate(k.id)} />,
                  },
                ]
              : []),
          ]}
        />
      )}
      <CreateModal<{ name: string }>
        title={t("dep.newKey")}
        open={open}
        onClose={() => setOpen(false)}
        onSubmit={async (v) => {
          const key = unwrap(
            await api.POST("/api/v1/deployments/{id}/keys/", { params: { path: { id: d.id } }, body: v }),
          ) as Schemas["DeploymentKeyCreated"];
          setCreated(key.token);
          qc.invalidateQueries({ queryKey: ["deployment-keys"] });
        }}
      >
        <Form.Item name="name" label={t("common.name")} rules={[{ required: true }]}>
          <Input data-testid="key-name" />
        </Form.Item>
      </CreateModal>
    </Space>
  );
}

/** The versions and aliases of the deployed model, as references a PATCH takes. */
function useModelRefs(d: Deployment | undefined, enabled: boolean) {
  return useQuery({
    queryKey: ["deployment-model-refs", d?.model],
    enabled: !!d && enabled,
    queryFn: async () => {
      const path = { id: d!.model };
      const model = unwrap(await api.GET("/api/v1/models/{id}/", { params: { path } }));
      const versions = unwrap(await api.GET("/api/v1/models/{id}/versions/", { params: { path, query: { page_size: 200 } } }));
      return [
        ...Object.entries(model.aliases).map(([alias, n]) => ({ value: `${model.name}@${alias}`, label: `@${alias} (v${n})` })),
        ...versions.results
          .filter((v) => v.state === "ready")
          .map((v) => ({ value: `${model.name}:${v.number}`, label: `v${v.number}${v.aliases.length ? ` (${v.aliases.join(", ")})` : ""}` })),
      ];
    },
  });
}

function Actions({ d }: { d: Deployment }) {
  const { t } = useI18n();
  const may = useDeploymentRole(d);
  const nav = useNavigate();
  const qc = useQueryClient();
  const [modal, setModal] = useState<"scale" | "version" | null>(null);
  const refs = useModelRefs(d, modal === "version");
  const patch = async (body: Record<string, unknown>) => {
    unwrap(await api.PATCH("/api/v1/deployments/{id}/", { params: { path: { id: d.id } }, body }));
    qc.invalidateQueries({ queryKey: ["deployment", d.id] });
    qc.invalidateQueries({ queryKey: ["deployment-events", d.id] });
    qc.invalidateQueries({ queryKey: ["deployments"] });
  };
  const stopped = d.state === "STOPPED" || !!d.archived_at;
  const c = counts(d);
  return (
    <Space wrap data-testid="deployment-actions">
      {may("update") && !stopped && (
        <Button onClick={() => setModal("scale")} data-testid="scale-button">
          {t("dep.scale")}
        </Button>
      )}
      {may("update") && !stopped && (
        <Button onClick={() => setModal("version")} data-testid="version-button">
          {t("dep.changeVersion")}
        </Button>
      )}
      {!d.archived_at && may("archive") && (
        <ArchiveButton kind="deployment" id={d.id} name={d.name} onArchived={() => nav("/deployments")} />
      )}
      {d.archived_at && may("restore") && <RestoreButton kind="deployment" id={d.id} name={d.name} />}
      <CreateModal<{ replicas: number; replicas_min: number; replicas_max: number }>
        title={t("dep.scale")}
        open={modal === "scale"}
        onClose={() => setModal(null)}
        initial={{ replicas: c.desired, replicas_min: c.min, replicas_max: c.max }}
        onSubmit={(v) => patch(v)}
      >
        <Form.Item name="replicas" label={t("dep.desired")} rules={[{ required: true }]}>
          <InputNumber min={0} max={64} data-testid="scale-replicas" />
        </Form.Item>
        <Form.Item name="replicas_min" label={t("dep.min")}>
          <InputNumber min={0} max={64} />
        </Form.Item>
        <Form.Item name="replicas_max" label={t("dep.max")}>
          <InputNumber min={1} max={64} />
        </Form.Item>
      </CreateModal>
      <CreateModal<{ model: string }>
        title={t("dep.changeVersion")}
        open={modal === "version"}
        onClose={() => setModal(null)}
        initial={{ model: d.ref }}
        onSubmit={(v) => patch(v)}
      >
        <Typography.Paragraph type="secondary">{t("dep.versionHelp")}</Typography.Paragraph>
        <Form.Item name="model" label={t("dep.model")} rules={[{ required: true }]}>
          <Select aria-label={t("dep.model")} loading={refs.isLoading} options={refs.data ?? []} showSearch />
        </Form.Item>
      </CreateModal>
    </Space>
  );
}

export default function DeploymentPage() {
  const { id } = useParams<{ id: string }>();
  const { t } = useI18n();
  const [tab, setTab] = useState("overview");
  const [minutes, setMinutes] = useState(60);
  const dep = useQuery({
    queryKey: ["deployment", id],
    refetchInterval: 5_000,
    queryFn: async () => unwrap(await api.GET("/api/v1/deployments/{id}/", { params: { path: { id: id! } } })),
  });
  const mayKeys = useDeploymentRole(dep.data)("keys");
  if (dep.isLoading) return <Loading />;
  if (dep.error) return <ErrorState error={dep.error} onRetry={() => dep.refetch()} />;
  const d = dep.data!;
  const c = counts(d);
  const r = resources(d);
  const l = limits(d);
  return (
    <div>
      <Space align="center" wrap style={{ marginBottom: 8 }}>
        <Typography.Title level={1} style={{ margin: 0, fontSize: 24 }} data-testid="deployment-name">
          {d.name}
        </Typography.Title>
        <DeploymentStateTag state={d.state} />
        <ArchivedTag at={d.archived_at} />
        <code>{servedRef(d)}</code>
        <span data-testid="deployment-replicas">
          {t("dep.replicasReady")}: {c.ready} / {c.desired}
        </span>
      </Space>
      {d.state_reason && (
        <Alert
          type={d.state === "FAILED" ? "error" : "info"}
          showIcon
          message={d.state_reason}
          data-testid="deployment-reason"
          style={{ marginBottom: 12 }}
        />
      )}
      <div style={{ marginBottom: 12 }}>
        <Actions d={d} />
      </div>
      <Tabs
        activeKey={tab}
        onChange={setTab}
        items={[
          {
            key: "overview",
            label: t("dep.replicas"),
            children: (
              <Space direction="vertical" style={{ width: "100%" }}>
                <Replicas id={d.id} />
                <Card size="small" title={t("dep.settings")}>
                  <Descriptions column={{ xs: 1, md: 2, xl: 3 }} size="small">
                    <Descriptions.Item label="id">{d.id}</Descriptions.Item>
                    <Descriptions.Item label={t("common.project")}>{d.project_slug}</Descriptions.Item>
                    <Descriptions.Item label={t("common.user")}>{d.created_by}</Descriptions.Item>
                    <Descriptions.Item label={t("dep.ref")}>
                      <code>{d.ref}</code> (v{versionNumber(d)})
                    </Descriptions.Item>
                    <Descriptions.Item label={t("dep.runtime")}>{d.runtime}</Descriptions.Item>
                    <Descriptions.Item label={t("dep.gateway")}>
                      <Typography.Text code copyable>{`${window.location.origin}${d.gateway}`}</Typography.Text>
                    </Descriptions.Item>
                    <Descriptions.Item label={t("dep.replicas")}>
                      {c.desired} ({t("dep.min")} {c.min}, {t("dep.max")} {c.max})
                    </Descriptions.Item>
                    <Descriptions.Item label={t("job.resources")}>
                      {r.gpus} GPU{r.gpu_type ? ` (${r.gpu_type})` : ""} · {r.cpus} CPU · {r.memory_mb} MiB
                    </Descriptions.Item>
                    <Descriptions.Item label={t("dep.engine")}>
                      {d.slots} {t("dep.slots")} × {d.context} {t("dep.tokens")} · KV {d.kv_cache_type}
                    </Descriptions.Item>
                    <Descriptions.Item label={t("dep.autoscaleTarget")}>{d.autoscale_target}</Descriptions.Item>
                    <Descriptions.Item label={t("dep.scaleToZero")}>
                      {d.scale_to_zero_after_s == null ? t("dep.never") : `${d.scale_to_zero_after_s} s`}
                    </Descriptions.Item>
                    <Descriptions.Item label={t("dep.limits")}>
                      {l.tokens_per_minute ?? "∞"} {t("dep.tokensPerMinute")} · {bytes(l.max_request_bytes)} · max_tokens{" "}
                      {l.max_tokens}
                    </Descriptions.Item>
                    <Descriptions.Item label={t("dep.lastRequest")}>{fmtTime(d.last_request_at)}</Descriptions.Item>
                    <Descriptions.Item label={t("common.created")}>{fmtTime(d.created_at)}</Descriptions.Item>
                  </Descriptions>
                </Card>
              </Space>
            ),
          },
          {
            key: "usage",
            label: t("dep.usage"),
            children: <UsageCharts id={d.id} minutes={minutes} setMinutes={setMinutes} />,
          },
          { key: "events", label: t("dep.events"), children: <Events id={d.id} /> },
          { key: "keys", label: t("dep.keys"), children: <Keys d={d} may={mayKeys} /> },
        ]}
      />
    </div>
  );
}
