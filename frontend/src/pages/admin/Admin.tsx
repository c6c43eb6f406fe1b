// The tenant admin console: one page per section (/console/:section). Each action is shown
// only to a role the API allows it (the generated role matrix); the API refuses the rest anyway.
import { useState } from "react";
import { useParams } from "react-router-dom";
import { Button, Card, DatePicker, Form, Input, InputNumber, Select, Space, Switch, Tag, Typography } from "antd";
import type { ColumnsType } from "antd/es/table";
import { keepPreviousData, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, cursorOf, unwrap, usageRows, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { useProjects } from "../../App";
import { EmptyState, Forbidden, fmtTime } from "../../components/common";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, ShownOnce, useMutate, useTenantList } from "./parts";
import { ArchiveButton, NameWithBadge, RestoreButton, ShowArchived, useMayArchive } from "../../components/Archive";
import { UtilisationChart } from "../../components/UtilisationChart";
import { SignatureTrend } from "./SignatureTrend";
import { Secrets } from "./Secrets";

const ROLES: Schemas["TenantRoleEnum"][] = ["viewer", "member", "admin", "owner"];

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
              <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(m.id)} />
            ),
          },
        ]
      : []),
  ];
  return (
    <Section title="admin.members">
      <ListTable query={list} columns={columns} />
    </Section>
  );
}

function Invitations() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const [created, setCreated] = useState<Schemas["InvitationCreated"] | null>(null);
  const list = useTenantList(
    "invitations",
    async () => unwrap(await api.GET("/api/v1/invitations/", { params: { query: { page_size: 200 } } })).results,
    can("invitation", "read"),
  );
  const revoke = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/invitations/{id}/", { params: { path: { id } } })),
    ["invitations"],
  );
  if (!can("invitation", "read")) return <Forbidden text={t("admin.notAdmin")} />;
  return (
    <Section
      title="nav.invitations"
      extra={<CreateButton allowed={can("invitation", "create")} onClick={() => setOpen(true)} label="admin.invite" />}
    >
      <ShownOnce
        value={created && `${window.location.origin}/invitations/accept?token=${created.token}`}
        onClose={() => setCreated(null)}
        message="admin.inviteToken"
        code={false}
      />
      <ListTable<Schemas["Invitation"]>
        query={list}
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
  const [archived, setArchived] = useState(false);
  const live = useProjects();
  const gone = useQuery({
    queryKey: ["projects", tenant?.id, "archived"],
    enabled: archived,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/projects/", { params: { query: { tenant: tenant!.id, archived: true, page_size: 500 } } }),
      ).results,
  });
  const mayArchive = useMayArchive();
  return (
    <Section
      title="nav.projects"
      extra={
        <Space>
          <ShowArchived checked={archived} onChange={setArchived} />
          <CreateButton allowed={can("project", "create")} onClick={() => setOpen(true)} testId="project-create" />
        </Space>
      }
    >
      <ListTable<Schemas["Project"]>
        query={archived ? gone : live}
        empty={archived ? t("archive.empty") : undefined}
        columns={[
          { title: t("admin.slug"), dataIndex: "slug", render: (s: string, p) => <NameWithBadge name={s} archivedAt={p.archived_at} /> },
          { title: t("common.name"), dataIndex: "name" },
          { title: t("admin.description"), dataIndex: "description" },
          { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          {
            title: t("common.actions"),
            render: (_: unknown, p: Schemas["Project"]) =>
              p.archived_at
                ? mayArchive("project", "restore") && <RestoreButton kind="project" id={p.id} name={p.slug} size="small" />
                : mayArchive("project") && <ArchiveButton kind="project" id={p.id} name={p.slug} size="small" />,
          },
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
  const list = useTenantList(
    "quotas",
    async () => unwrap(await api.GET("/api/v1/quotas/", { params: { query: { page_size: 500 } } })).results,
  );
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
  const tenantGpus = (list.data ?? []).find((q) => q.scope === "tenant")?.gpus ?? null;
  return (
    <Section
      title="nav.quotas"
      extra={
        <Space>
          <a href="/api/v1/usage/export?group_by=project_user" download>
            <Button>{t("admin.exportCsv")}</Button>
          </a>
          <CreateButton allowed={can("quota", "create")} onClick={() => setEditing("new")} label="admin.newQuota" />
        </Space>
      }
    >
      <Card size="small" title={t("usage.title")} style={{ marginBottom: 12 }}>
        <UtilisationChart tenantId={tenant!.id} quota={tenantGpus} />
        <Typography.Text type="secondary">{t("usage.note")}</Typography.Text>
      </Card>
      <ListTable<Schemas["Quota"]>
        query={list}
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
                {can("quota", "delete") && <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(q.id)} />}
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
  const list = useTenantList(
    "tokens",
    async () => unwrap(await api.GET("/api/v1/tokens/", { params: { query: { page_size: 200 } } })).results,
  );
  const revoke = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/tokens/{id}/", { params: { path: { id } } })),
    ["tokens"],
  );
  return (
    <Section
      title="nav.tokens"
      extra={<CreateButton allowed={can("token", "create")} onClick={() => setOpen(true)} />}
    >
      <ShownOnce value={created} onClose={() => setCreated(null)} message="admin.tokenCreated" />
      <ListTable<Schemas["AccessToken"]>
        query={list}
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
              x.active && <ConfirmButton label="common.revoke" onConfirm={() => revoke.mutate(x.id)} />,
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
      <ListTable<Schemas["AuditEvent"]>
        query={list}
        rows={list.data?.results}
        pagination={false}
        columns={[
          { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          { title: t("admin.actor"), dataIndex: "actor" },
          { title: t("admin.action"), dataIndex: "action", render: (a: string) => <Tag>{a}</Tag> },
          { title: t("admin.target"), render: (_, e) => `${e.target_type} ${e.target_repr}` },
          { title: "ip", dataIndex: "ip" },
        ]}
      />
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
  const list = useTenantList(
    "signatures",
    async () => unwrap(await api.GET("/api/v1/failure-signatures/", { params: { query: { page_size: 200 } } })).results,
  );
  const stats = useQuery({
    queryKey: ["signature-stats", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/failure-signatures/stats/")).results,
  });
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/failure-signatures/{id}/", { params: { path: { id } } })),
    ["signatures"],
  );
  const statOf = (id: string) => stats.data?.find((s) => s.id === id);
  return (
    <Section
      title="nav.signatures"
      extra={<CreateButton allowed={can("failure-signature", "create")} onClick={() => setOpen(true)} />}
    >
      {!!list.data?.length && (
        <Card size="small" title={t("admin.signatureTrend")} style={{ marginBottom: 12 }}>
          <SignatureTrend tenantId={tenant!.id} names={list.data.map((s) => s.name)} />
        </Card>
      )}
      <ListTable<Schemas["FailureSignature"]>
        query={list}
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
                    <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(s.id)} />
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
  const colors: Record<string, string> = { succeeded: "green", failed: "red", pending: "gold" };
  return (
    <ListTable<Schemas["WebhookDelivery"]>
      query={q}
      pagination={false}
      empty={t("webhook.noDeliveries")}
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
  const list = useTenantList(
    "webhooks",
    async () => unwrap(await api.GET("/api/v1/webhooks/", { params: { query: { page_size: 200 } } })).results,
    can("webhook", "read"),
  );
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/webhooks/{id}/", { params: { path: { id } } })),
    ["webhooks"],
  );
  if (!can("webhook", "read")) return <Forbidden text={t("admin.notAdmin")} />;
  return (
    <Section
      title="nav.webhooks"
      extra={<CreateButton allowed={can("webhook", "create")} onClick={() => setOpen(true)} testId="webhook-create" />}
    >
      <ShownOnce value={secret} onClose={() => setSecret(null)} message="webhook.secretOnce" testId="webhook-secret" />
      <ListTable<Schemas["Webhook"]>
        query={list}
        expandable={{ expandedRowRender: (w) => <Deliveries id={w.id} /> }}
        columns={[
          { title: "URL", dataIndex: "url", render: (u: string) => <code>{u}</code> },
          { title: t("webhook.events"), dataIndex: "events", render: (e: string[]) => e.map((x) => <Tag key={x}>{x}</Tag>) },
          { title: t("admin.description"), dataIndex: "description" },
          { title: t("admin.active"), dataIndex: "active", render: (v: boolean) => (v ? "✓" : "✗") },
          { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          ...(can("webhook", "delete")
            ? [
                {
                  title: t("common.actions"),
                  render: (_: unknown, w: Schemas["Webhook"]) => (
                    <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(w.id)} />
                  ),
                },
              ]
            : []),
        ]}
      />
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
  secrets: Secrets,
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
