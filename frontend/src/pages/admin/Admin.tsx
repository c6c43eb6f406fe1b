// The tenant admin console: one page per section (/admin/:section). Each action is shown only
// to a role the API allows it (the generated role matrix); the API refuses the rest anyway.
import { useState, type ReactNode } from "react";
import { useParams } from "react-router-dom";
import {
  App, Alert, Button, Card, DatePicker, Form, Input, InputNumber, Modal, Popconfirm, Select, Space, Switch, Table, Tag,
  Typography,
} from "antd";
import type { ColumnsType } from "antd/es/table";
import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, ApiError, cursorOf, flatFields, unwrap, usageRows, type Schemas } from "../../api/client";
import { useI18n, type Key } from "../../i18n";
import { useSession } from "../../session";
import { useProjects } from "../../App";
import { EmptyState, ErrorState, Forbidden, fmtTime } from "../../components/common";
import { Chart } from "../../components/Chart";

const ROLES: Schemas["TenantRoleEnum"][] = ["viewer", "member", "admin", "owner"];

function Section({ title, extra, children }: { title: Key; extra?: ReactNode; children: ReactNode }) {
  const { t } = useI18n();
  return (
    <div>
      <Space style={{ width: "100%", justifyContent: "space-between" }}>
        <Typography.Title level={1} style={{ fontSize: 24 }}>{t(title)}</Typography.Title>
        {extra}
      </Space>
      {children}
    </div>
  );
}

function useMutate<T>(fn: (v: T) => Promise<unknown>, keys: string[]) {
  const qc = useQueryClient();
  const { message } = App.useApp();
  return useMutation({
    mutationFn: fn,
    onSuccess: () => keys.forEach((k) => qc.invalidateQueries({ queryKey: [k] })),
    onError: (e) => message.error(e instanceof ApiError ? e.message : String(e)),
  });
}

/** A form in a modal whose API field errors land at the field. */
function CreateModal<T extends object>({
  title,
  open,
  onClose,
  onSubmit,
  children,
  initial,
}: {
  title: string;
  open: boolean;
  onClose: () => void;
  onSubmit: (v: T) => Promise<unknown>;
  children: ReactNode;
  initial?: Partial<T>;
}) {
  const [form] = Form.useForm<T>();
  const [error, setError] = useState<string | null>(null);
  const { t } = useI18n();
  return (
    <Modal
      title={title}
      open={open}
      onCancel={onClose}
      okText={t("common.save")}
      cancelText={t("common.cancel")}
      onOk={() => form.submit()}
      destroyOnClose
    >
      <Form<T>
        form={form}
        layout="vertical"
        preserve={false}
        initialValues={initial}
        onFinish={async (v) => {
          setError(null);
          try {
            await onSubmit(v);
            onClose();
          } catch (e) {
            if (e instanceof ApiError) {
              const fields = flatFields(e.fields);
              form.setFields(Object.entries(fields).map(([name, msg]) => ({ name: name as never, errors: [msg] })));
              setError(e.message);
            } else setError(String(e));
          }
        }}
      >
        {children}
        {error && <Alert type="error" role="alert" message={error} />}
      </Form>
    </Modal>
  );
}

function Members() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const list = useQuery({
    queryKey: ["memberships", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/memberships/", { params: { query: { tenant: tenant!.id, page_size: 500 } } })).results,
  });
  const setRole = useMutate(
    async ({ id, role }: { id: string; role: Schemas["TenantRoleEnum"] }) =>
      unwrap(await api.PATCH("/api/v1/memberships/{id}/", { params: { path: { id } }, body: { role } })),
    ["memberships"],
  );
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/memberships/{id}/", { params: { path: { id } } })),
    ["memberships"],
  );
  const admin = can("membership", "update");
  const columns: ColumnsType<Schemas["Membership"]> = [
    { title: t("common.user"), render: (_, m) => String((m.user_detail as Record<string, unknown>).username ?? "") },
    { title: t("admin.email"), render: (_, m) => String((m.user_detail as Record<string, unknown>).email ?? "") },
    {
      title: t("common.role"),
      render: (_, m) =>
        admin ? (
          <Select
            aria-label={t("common.role")}
            value={m.role}
            style={{ width: 120 }}
            onChange={(role) => setRole.mutate({ id: m.id, role })}
            options={ROLES.map((r) => ({ value: r, label: r }))}
          />
        ) : (
          <Tag>{m.role}</Tag>
        ),
    },
    { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
    ...(can("membership", "delete")
      ? [
          {
            title: t("common.actions"),
            render: (_: unknown, m: Schemas["Membership"]) => (
              <Popconfirm title={t("common.delete")} onConfirm={() => remove.mutate(m.id)}>
                <Button danger size="small">
                  {t("common.delete")}
                </Button>
              </Popconfirm>
            ),
          },
        ]
      : []),
  ];
  return (
    <Section title="admin.members">
      {list.error ? <ErrorState error={list.error} /> : <Table rowKey="id" size="small" loading={list.isLoading} dataSource={list.data} columns={columns} />}
    </Section>
  );
}

function Invitations() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const [created, setCreated] = useState<Schemas["InvitationCreated"] | null>(null);
  const list = useQuery({
    queryKey: ["invitations", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/invitations/", { params: { query: { page_size: 200 } } })).results.filter(
        (i) => i.tenant_id === tenant!.id,
      ),
  });
  const revoke = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/invitations/{id}/", { params: { path: { id } } })),
    ["invitations"],
  );
  if (!can("invitation", "read")) return <Forbidden text={t("admin.notAdmin")} />;
  return (
    <Section
      title="nav.invitations"
      extra={
        can("invitation", "create") && (
          <Button type="primary" onClick={() => setOpen(true)}>
            {t("admin.invite")}
          </Button>
        )
      }
    >
      {created && (
        <Alert
          type="success"
          closable
          onClose={() => setCreated(null)}
          message={t("admin.inviteToken")}
          description={<Typography.Text copyable>{`${window.location.origin}/invitations/accept?token=${created.token}`}</Typography.Text>}
          style={{ marginBottom: 12 }}
        />
      )}
      <Table
        rowKey="id"
        size="small"
        loading={list.isLoading}
        dataSource={list.data}
        locale={{ emptyText: <EmptyState /> }}
        columns={[
          { title: t("admin.email"), dataIndex: "email" },
          { title: t("auth.username"), dataIndex: "username" },
          { title: t("common.role"), dataIndex: "role" },
          { title: t("admin.status"), dataIndex: "status", render: (s: string) => <Tag>{s}</Tag> },
          { title: t("admin.expires"), dataIndex: "expires_at", render: fmtTime },
          {
            title: t("common.actions"),
            render: (_, i) =>
              i.status === "pending" &&
              can("invitation", "delete") && (
                <Button size="small" danger onClick={() => revoke.mutate(i.id)}>
                  {t("common.revoke")}
                </Button>
              ),
          },
        ]}
      />
      <CreateModal<{ email?: string; username?: string; role: Schemas["TenantRoleEnum"] }>
        title={t("admin.invite")}
        open={open}
        onClose={() => setOpen(false)}
        initial={{ role: "member" }}
        onSubmit={async (v) => {
          const res = unwrap(
            await api.POST("/api/v1/invitations/", {
              body: { tenant: tenant!.id, role: v.role, email: v.email || undefined, username: v.username || undefined },
            }),
          );
          setCreated(res);
          qc.invalidateQueries({ queryKey: ["invitations"] });
        }}
      >
        <Form.Item label={t("admin.email")} name="email">
          <Input type="email" />
        </Form.Item>
        <Form.Item label={t("auth.username")} name="username">
          <Input />
        </Form.Item>
        <Form.Item label={t("common.role")} name="role">
          <Select options={ROLES.map((r) => ({ value: r, label: r }))} />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}

function Projects() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const list = useProjects();
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/projects/{id}/", { params: { path: { id } } })),
    ["projects"],
  );
  return (
    <Section
      title="nav.projects"
      extra={
        can("project", "create") && (
          <Button type="primary" onClick={() => setOpen(true)} data-testid="project-create">
            {t("common.create")}
          </Button>
        )
      }
    >
      <Table
        rowKey="id"
        size="small"
        loading={list.isLoading}
        dataSource={list.data}
        columns={[
          { title: t("admin.slug"), dataIndex: "slug" },
          { title: t("common.name"), dataIndex: "name" },
          { title: t("admin.description"), dataIndex: "description" },
          { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          ...(can("project", "delete")
            ? [
                {
                  title: t("common.actions"),
                  render: (_: unknown, p: Schemas["Project"]) => (
                    <Popconfirm title={t("common.delete")} onConfirm={() => remove.mutate(p.id)}>
                      <Button size="small" danger>
                        {t("common.delete")}
                      </Button>
                    </Popconfirm>
                  ),
                },
              ]
            : []),
        ]}
      />
      <CreateModal<{ name: string; slug: string; description?: string }>
        title={t("nav.projects")}
        open={open}
        onClose={() => setOpen(false)}
        onSubmit={async (v) => {
          unwrap(await api.POST("/api/v1/projects/", { body: { ...v, tenant: tenant!.id } }));
          qc.invalidateQueries({ queryKey: ["projects"] });
        }}
      >
        <Form.Item label={t("common.name")} name="name" rules={[{ required: true }]}>
          <Input />
        </Form.Item>
        <Form.Item label={t("admin.slug")} name="slug" rules={[{ required: true }]}>
          <Input />
        </Form.Item>
        <Form.Item label={t("admin.description")} name="description">
          <Input.TextArea />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}

type QuotaForm = Partial<Pick<Schemas["Quota"], "gpus" | "cpus" | "memory_mb" | "running_jobs" | "gpu_hours_per_month">> & {
  project?: string | null;
  user?: string | null;
};

function Quotas() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const projects = useProjects();
  const [editing, setEditing] = useState<Schemas["Quota"] | "new" | null>(null);
  const list = useQuery({
    queryKey: ["quotas", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/quotas/", { params: { query: { page_size: 500 } } })).results.filter(
        (q) => q.tenant_id === tenant!.id,
      ),
  });
  const usage = useQuery({
    queryKey: ["usage", tenant?.id, "project"],
    queryFn: async () =>
      usageRows(unwrap(await api.GET("/api/v1/usage/", { params: { query: { group_by: "project" } } }))),
  });
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/quotas/{id}/", { params: { path: { id } } })),
    ["quotas"],
  );
  const slugOf = (id: string | null | undefined) => projects.data?.find((p) => p.id === id)?.slug;
  const used = (usage.data ?? []).filter((r) => r.tenant === tenant?.slug);
  const usedFor = (q: Schemas["Quota"]) =>
    used
      .filter((r) => (q.project ? r.project === slugOf(q.project) : true))
      .reduce((s, r) => s + r.gpu_hours, 0);
  const lim = (v: number | null | undefined) => (v == null ? "∞" : String(v));
  return (
    <Section
      title="nav.quotas"
      extra={
        <Space>
          <a href="/api/v1/usage/export?group_by=project_user" download>
            <Button>{t("admin.exportCsv")}</Button>
          </a>
          {can("quota", "create") && (
            <Button type="primary" onClick={() => setEditing("new")}>
              {t("admin.newQuota")}
            </Button>
          )}
        </Space>
      }
    >
      <Card size="small" title={`${t("admin.usage")} (GPU h)`} style={{ marginBottom: 12 }}>
        <Chart
          label={t("admin.usage")}
          height={180}
          option={{
            animation: false,
            grid: { left: 50, right: 16, top: 16, bottom: 30 },
            tooltip: { trigger: "axis" },
            xAxis: { type: "category", data: used.map((r) => r.project ?? "") },
            yAxis: { type: "value" },
            series: [{ type: "bar", data: used.map((r) => r.gpu_hours) }],
          }}
        />
      </Card>
      <Table
        rowKey="id"
        size="small"
        loading={list.isLoading}
        dataSource={list.data}
        locale={{ emptyText: <EmptyState /> }}
        columns={[
          {
            title: t("admin.scope"),
            render: (_, q) => [q.scope, slugOf(q.project), q.user].filter(Boolean).join(" · "),
          },
          { title: t("admin.gpus"), dataIndex: "gpus", render: lim },
          { title: t("admin.cpus"), dataIndex: "cpus", render: lim },
          { title: t("admin.memory"), dataIndex: "memory_mb", render: lim },
          { title: t("admin.runningJobs"), dataIndex: "running_jobs", render: lim },
          {
            title: t("admin.gpuHoursMonth"),
            render: (_, q) => `${usedFor(q).toFixed(2)} / ${lim(q.gpu_hours_per_month)}`,
          },
          {
            title: t("common.actions"),
            render: (_, q) => (
              <Space>
                {can("quota", "update") && (
                  <Button size="small" onClick={() => setEditing(q)} data-testid="quota-edit">
                    {t("common.edit")}
                  </Button>
                )}
                {can("quota", "delete") && (
                  <Popconfirm title={t("common.delete")} onConfirm={() => remove.mutate(q.id)}>
                    <Button size="small" danger>
                      {t("common.delete")}
                    </Button>
                  </Popconfirm>
                )}
              </Space>
            ),
          },
        ]}
      />
      <CreateModal<QuotaForm>
        title={editing === "new" ? t("admin.newQuota") : t("common.edit")}
        open={editing != null}
        onClose={() => setEditing(null)}
        initial={editing && editing !== "new" ? editing : {}}
        onSubmit={async (v) => {
          const limits = {
            gpus: v.gpus ?? null,
            cpus: v.cpus ?? null,
            memory_mb: v.memory_mb ?? null,
            running_jobs: v.running_jobs ?? null,
            gpu_hours_per_month: v.gpu_hours_per_month ?? null,
          };
          if (editing === "new")
            unwrap(
              await api.POST("/api/v1/quotas/", {
                body: { tenant: tenant!.id, project: v.project || null, user: v.user || null, ...limits },
              }),
            );
          else if (editing)
            unwrap(await api.PATCH("/api/v1/quotas/{id}/", { params: { path: { id: editing.id } }, body: limits }));
          qc.invalidateQueries({ queryKey: ["quotas"] });
        }}
      >
        {editing === "new" && (
          <>
            <Form.Item label={t("common.project")} name="project">
              <Select allowClear options={(projects.data ?? []).map((p) => ({ value: p.id, label: p.slug }))} />
            </Form.Item>
            <Form.Item label={t("common.user")} name="user">
              <Input />
            </Form.Item>
          </>
        )}
        {(
          [
            ["gpus", "admin.gpus"],
            ["cpus", "admin.cpus"],
            ["memory_mb", "admin.memory"],
            ["running_jobs", "admin.runningJobs"],
            ["gpu_hours_per_month", "admin.gpuHoursMonth"],
          ] as const
        ).map(([name, label]) => (
          <Form.Item key={name} label={t(label)} name={name}>
            <InputNumber min={0} style={{ width: "100%" }} data-testid={`quota-${name}`} />
          </Form.Item>
        ))}
      </CreateModal>
    </Section>
  );
}

function Tokens() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const [created, setCreated] = useState<string | null>(null);
  const list = useQuery({
    queryKey: ["tokens", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/tokens/", { params: { query: { page_size: 200 } } })).results.filter(
        (x) => x.tenant_id === tenant!.id,
      ),
  });
  const revoke = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/tokens/{id}/", { params: { path: { id } } })),
    ["tokens"],
  );
  return (
    <Section
      title="nav.tokens"
      extra={
        can("token", "create") && (
          <Button type="primary" onClick={() => setOpen(true)}>
            {t("common.create")}
          </Button>
        )
      }
    >
      {created && (
        <Alert
          type="success"
          closable
          onClose={() => setCreated(null)}
          message={t("admin.tokenCreated")}
          description={<Typography.Text copyable code>{created}</Typography.Text>}
          style={{ marginBottom: 12 }}
        />
      )}
      <Table
        rowKey="id"
        size="small"
        loading={list.isLoading}
        dataSource={list.data}
        locale={{ emptyText: <EmptyState /> }}
        columns={[
          { title: t("common.name"), dataIndex: "name" },
          { title: t("common.user"), render: (_, x) => x.user.username },
          { title: "prefix", dataIndex: "prefix", render: (p: string) => <code>{p}…</code> },
          { title: t("admin.readOnly"), dataIndex: "read_only", render: (v: boolean) => (v ? "✓" : "") },
          { title: t("admin.active"), dataIndex: "active", render: (v: boolean) => <Tag color={v ? "green" : "default"}>{v ? "✓" : "✗"}</Tag> },
          { title: t("admin.expires"), dataIndex: "expires_at", render: fmtTime },
          { title: t("admin.lastUsed"), dataIndex: "last_used_at", render: fmtTime },
          {
            title: t("common.actions"),
            render: (_, x) =>
              x.active && (
                <Popconfirm title={t("common.revoke")} onConfirm={() => revoke.mutate(x.id)}>
                  <Button size="small" danger>
                    {t("common.revoke")}
                  </Button>
                </Popconfirm>
              ),
          },
        ]}
      />
      <CreateModal<{ name: string; read_only?: boolean; expires_at?: { toISOString: () => string } }>
        title={t("nav.tokens")}
        open={open}
        onClose={() => setOpen(false)}
        onSubmit={async (v) => {
          const res = unwrap(
            await api.POST("/api/v1/tokens/", {
              body: { name: v.name, tenant: tenant!.id, read_only: !!v.read_only, expires_at: v.expires_at?.toISOString() ?? null },
            }),
          );
          setCreated(res.token);
          qc.invalidateQueries({ queryKey: ["tokens"] });
        }}
      >
        <Form.Item label={t("common.name")} name="name" rules={[{ required: true }]}>
          <Input />
        </Form.Item>
        <Form.Item label={t("admin.readOnly")} name="read_only" valuePropName="checked">
          <Switch />
        </Form.Item>
        <Form.Item label={t("admin.expires")} name="expires_at">
          <DatePicker showTime />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}

function Audit() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const [filters, setFilters] = useState<{ action_prefix?: string; actor?: string; target_type?: string }>({});
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const query = { tenant: tenant?.id, ...filters, page_size: 50, cursor: cursors[cursors.length - 1] };
  const list = useQuery({
    queryKey: ["audit", query],
    enabled: can("audit-event", "read"),
    placeholderData: keepPreviousData,
    queryFn: async () => unwrap(await api.GET("/api/v1/audit-events/", { params: { query } })),
  });
  if (!can("audit-event", "read")) return <Forbidden text={t("admin.notAdmin")} />;
  const set = (k: keyof typeof filters) => (v: string) => {
    setFilters((f) => ({ ...f, [k]: v || undefined }));
    setCursors([undefined]);
  };
  return (
    <Section title="nav.audit">
      <Space wrap style={{ marginBottom: 12 }}>
        <Input.Search aria-label={t("admin.action")} placeholder={`${t("admin.action")} (job., token.…)`} allowClear onSearch={set("action_prefix")} />
        <Input.Search aria-label={t("admin.actor")} placeholder={t("admin.actor")} allowClear onSearch={set("actor")} />
        <Input.Search aria-label={t("admin.target")} placeholder={t("admin.target")} allowClear onSearch={set("target_type")} />
      </Space>
      {list.error ? (
        <ErrorState error={list.error} />
      ) : (
        <Table
          rowKey="id"
          size="small"
          pagination={false}
          loading={list.isLoading}
          dataSource={list.data?.results}
          locale={{ emptyText: <EmptyState /> }}
          columns={[
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
            { title: t("admin.actor"), dataIndex: "actor" },
            { title: t("admin.action"), dataIndex: "action", render: (a: string) => <Tag>{a}</Tag> },
            { title: t("admin.target"), render: (_, e) => `${e.target_type} ${e.target_repr}` },
            { title: "ip", dataIndex: "ip" },
          ]}
        />
      )}
      <Space style={{ marginTop: 12 }}>
        <Button disabled={cursors.length < 2} onClick={() => setCursors((c) => c.slice(0, -1))}>
          {t("common.prev")}
        </Button>
        <Button disabled={!list.data?.next} onClick={() => setCursors((c) => [...c, cursorOf(list.data?.next)])}>
          {t("common.next")}
        </Button>
      </Space>
    </Section>
  );
}

function Signatures() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const list = useQuery({
    queryKey: ["signatures", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/failure-signatures/", { params: { query: { page_size: 200 } } })).results.filter(
        (s) => s.tenant_id === tenant!.id,
      ),
  });
  const stats = useQuery({
    queryKey: ["signature-stats", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/failure-signatures/stats/", { params: { query: { page_size: 200 } } })).results,
  });
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/failure-signatures/{id}/", { params: { path: { id } } })),
    ["signatures"],
  );
  const statOf = (id: string) => stats.data?.find((s) => s.id === id);
  return (
    <Section
      title="nav.signatures"
      extra={
        can("failure-signature", "create") && (
          <Button type="primary" onClick={() => setOpen(true)}>
            {t("common.create")}
          </Button>
        )
      }
    >
      <Table
        rowKey="id"
        size="small"
        loading={list.isLoading}
        dataSource={list.data}
        locale={{ emptyText: <EmptyState /> }}
        columns={[
          { title: t("common.name"), dataIndex: "name", render: (n: string) => <a href={`/jobs?signature=${encodeURIComponent(n)}`}>{n}</a> },
          { title: t("admin.pattern"), dataIndex: "query", render: (q: string) => <code>{q}</code> },
          { title: t("admin.jobs"), render: (_, s) => statOf(s.id)?.jobs ?? 0 },
          { title: t("admin.attemptsCount"), render: (_, s) => statOf(s.id)?.attempts ?? 0 },
          ...(can("failure-signature", "delete")
            ? [
                {
                  title: t("common.actions"),
                  render: (_: unknown, s: Schemas["FailureSignature"]) => (
                    <Popconfirm title={t("common.delete")} onConfirm={() => remove.mutate(s.id)}>
                      <Button size="small" danger>
                        {t("common.delete")}
                      </Button>
                    </Popconfirm>
                  ),
                },
              ]
            : []),
        ]}
      />
      <CreateModal<{ name: string; query: string }>
        title={t("nav.signatures")}
        open={open}
        onClose={() => setOpen(false)}
        onSubmit={async (v) => {
          unwrap(await api.POST("/api/v1/failure-signatures/", { body: v }));
          qc.invalidateQueries({ queryKey: ["signatures"] });
        }}
      >
        <Form.Item label={t("common.name")} name="name" rules={[{ required: true }]}>
          <Input />
        </Form.Item>
        <Form.Item label={t("admin.pattern")} name="query" rules={[{ required: true }]}>
          <Input />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}

const EVENTS: Schemas["EventsEnum"][] = ["model_version.created", "alias.changed"];

function Deliveries({ id }: { id: string }) {
  const { t } = useI18n();
  const q = useQuery({
    queryKey: ["webhook-deliveries", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/webhooks/{id}/deliveries/", { params: { path: { id }, query: { page_size: 50 } } })).results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  const colors: Record<string, string> = { succeeded: "green", failed: "red", pending: "gold" };
  return (
    <Table<Schemas["WebhookDelivery"]>
      rowKey="id"
      size="small"
      pagination={false}
      loading={q.isLoading}
      dataSource={q.data}
      locale={{ emptyText: <EmptyState>{t("webhook.noDeliveries")}</EmptyState> }}
      columns={[
        { title: t("webhook.event"), dataIndex: "event" },
        { title: t("common.state"), dataIndex: "state", render: (v: string) => <Tag color={colors[v]}>{v}</Tag> },
        { title: t("webhook.attempts"), dataIndex: "attempts" },
        { title: "HTTP", dataIndex: "response_code", render: (v: number | null) => v ?? "—" },
        { title: t("common.error"), dataIndex: "error" },
        { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
        { title: t("webhook.delivered"), dataIndex: "delivered_at", render: fmtTime },
      ]}
    />
  );
}

function Webhooks() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const [secret, setSecret] = useState<string | null>(null);
  const list = useQuery({
    queryKey: ["webhooks", tenant?.id],
    enabled: can("webhook", "read"),
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/webhooks/", { params: { query: { page_size: 200 } } })).results.filter(
        (x) => x.tenant_id === tenant!.id,
      ),
  });
  if (!can("webhook", "read")) return <Forbidden text={t("admin.notAdmin")} />;
  return (
    <Section
      title="nav.webhooks"
      extra={
        can("webhook", "create") && (
          <Button type="primary" onClick={() => setOpen(true)} data-testid="webhook-create">
            {t("common.create")}
          </Button>
        )
      }
    >
      {secret && (
        <Alert
          type="success"
          closable
          onClose={() => setSecret(null)}
          message={t("webhook.secretOnce")}
          description={<Typography.Text copyable code data-testid="webhook-secret">{secret}</Typography.Text>}
          style={{ marginBottom: 12 }}
        />
      )}
      {list.error ? (
        <ErrorState error={list.error} onRetry={() => list.refetch()} />
      ) : (
        <Table<Schemas["Webhook"]>
          rowKey="id"
          size="small"
          loading={list.isLoading}
          dataSource={list.data}
          locale={{ emptyText: <EmptyState /> }}
          expandable={{ expandedRowRender: (w) => <Deliveries id={w.id} /> }}
          columns={[
            { title: "URL", dataIndex: "url", render: (u: string) => <code>{u}</code> },
            { title: t("webhook.events"), dataIndex: "events", render: (e: string[]) => e.map((x) => <Tag key={x}>{x}</Tag>) },
            { title: t("admin.description"), dataIndex: "description" },
            { title: t("admin.active"), dataIndex: "active", render: (v: boolean) => (v ? "✓" : "✗") },
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          ]}
        />
      )}
      <CreateModal<{ url: string; events: Schemas["EventsEnum"][]; description?: string }>
        title={t("nav.webhooks")}
        open={open}
        onClose={() => setOpen(false)}
        initial={{ events: EVENTS }}
        onSubmit={async (v) => {
          const res = unwrap(
            await api.POST("/api/v1/webhooks/", {
              body: { tenant: tenant!.id, url: v.url, events: v.events, description: v.description ?? "" },
            }),
          ) as Schemas["WebhookCreated"];
          setSecret(res.secret);
          qc.invalidateQueries({ queryKey: ["webhooks"] });
        }}
      >
        <Form.Item label="URL" name="url" rules={[{ required: true }]}>
          <Input placeholder="https://" data-testid="webhook-url" />
        </Form.Item>
        <Form.Item label={t("webhook.events")} name="events" rules={[{ required: true }]}>
          <Select mode="multiple" options={EVENTS.map((e) => ({ value: e, label: e }))} />
        </Form.Item>
        <Form.Item label={t("admin.description")} name="description">
          <Input />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}

const SECTIONS: Record<string, () => JSX.Element> = {
  members: Members,
  invitations: Invitations,
  projects: Projects,
  quotas: Quotas,
  tokens: Tokens,
  audit: Audit,
  signatures: Signatures,
  webhooks: Webhooks,
};

export default function AdminPage() {
  const { section = "members" } = useParams();
  const { tenant } = useSession();
  const { t } = useI18n();
  if (!tenant) return <EmptyState>{t("common.noTenant")}</EmptyState>;
  const Page = SECTIONS[section] ?? Members;
  return <Page key={tenant.id} />;
}
