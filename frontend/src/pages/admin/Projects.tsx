// The tenant's projects (/console/projects): created, archived and restored; their idle policy.
import { useState } from "react";
import { Button, Form, Input, InputNumber, Space } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { useProjects } from "../../projects";
import { fmtTime } from "../../components/common";
import { ArchiveButton, NameWithBadge, RestoreButton, ShowArchived, useMayArchive } from "../../components/Archive";
import { CreateButton, CreateModal, ListTable, Section } from "./parts";

export function Projects() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const [archived, setArchived] = useState(false);
  const [policyOf, setPolicyOf] = useState<Schemas["Project"] | null>(null);
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
            title: t("admin.idlePolicy"),
            render: (_: unknown, p: Schemas["Project"]) => (
              <Space>
                {p.idle_minutes
                  ? t("admin.idlePolicyOn")
                      .replace("{minutes}", String(p.idle_minutes))
                      .replace("{grace}", String(p.idle_grace_minutes))
                  : t("admin.idlePolicyOff")}
                {!p.archived_at && can("project", "update") && (
                  <Button size="small" data-testid={`idle-policy-${p.slug}`} onClick={() => setPolicyOf(p)}>
                    {t("common.edit")}
                  </Button>
                )}
              </Space>
            ),
          },
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
      <CreateModal<{ idle_minutes: number | null; idle_grace_minutes: number }>
        title={`${t("admin.idlePolicy")}: ${policyOf?.slug ?? ""}`}
        open={!!policyOf}
        onClose={() => setPolicyOf(null)}
        initial={{ idle_minutes: policyOf?.idle_minutes ?? null, idle_grace_minutes: policyOf?.idle_grace_minutes ?? 15 }}
        onSubmit={async (v) => {
          const body = { idle_minutes: v.idle_minutes || null, idle_grace_minutes: v.idle_grace_minutes };
          unwrap(await api.PATCH("/api/v1/projects/{id}/", { params: { path: { id: policyOf!.id } }, body }));
          qc.invalidateQueries({ queryKey: ["projects"] });
        }}
      >
        <Form.Item label={t("admin.idleMinutes")} name="idle_minutes" extra={t("admin.idleMinutesHelp")}>
          <InputNumber min={1} max={10080} />
        </Form.Item>
        <Form.Item label={t("admin.idleGrace")} name="idle_grace_minutes" rules={[{ required: true }]}>
          <InputNumber min={0} max={10080} />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}
