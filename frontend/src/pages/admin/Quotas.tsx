// Quotas (/console/quotas): the tenant's, a project's or a user's limits, GPU hours used this
// month beside them, the utilisation chart and the usage export.
import { useState } from "react";
import { Button, Card, Form, Input, InputNumber, Select, Space, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, usageRows, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { useProjects } from "../../projects";
import { UtilisationChart } from "../../components/UtilisationChart";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, useMutate, useTenantList } from "./parts";

type QuotaForm = Partial<Pick<Schemas["Quota"], "gpus" | "cpus" | "memory_mb" | "running_jobs" | "gpu_hours_per_month">> & {
  project?: string | null;
  user?: string | null;
};

export function Quotas() {
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
