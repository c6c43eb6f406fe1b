// The tenant's projects (/console/projects): created, archived and restored.
import { useState } from "react";
import { Form, Input, Space } from "antd";
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
