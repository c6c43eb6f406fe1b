// A project's secrets (/console/secrets): names, versions and who set them. A value goes in
// through a password field (not revealable, cleared when the dialog closes) and never comes
// back: the API has no route that returns one. Jobs name them in their spec (docs/jobs.md).
import { useState } from "react";
import { App, Form, Input, Select, Space, Tag, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { useProjects } from "../../projects";
import { EmptyState, Forbidden, fmtTime } from "../../components/common";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, useMutate } from "./parts";

export type Secret = Schemas["Secret"];

export const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/** The names (no values) of a project's secrets, for whoever may read them. */
export function useSecrets(project: string | null | undefined, enabled = true) {
  return useQuery({
    queryKey: ["secrets", project],
    enabled: !!project && enabled,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/projects/{id}/secrets/", {
          params: { path: { id: project! }, query: { page_size: 500 } },
        }),
      ).results,
  });
}

const byWhom = (who: unknown) =>
  who && typeof who === "object" ? String((who as { username?: string }).username ?? "") : String(who ?? "—");

export function Secrets() {
  const { t } = useI18n();
  const { message } = App.useApp();
  const { project: current, can } = useSession();
  const qc = useQueryClient();
  const projects = useProjects();
  const [picked, setPicked] = useState<string | null>(null);
  const [editing, setEditing] = useState<string | "new" | null>(null);
  const project = picked ?? current ?? projects.data?.[0]?.id ?? null;
  const list = useSecrets(project, can("secret", "read"));
  const remove = useMutate(
    async (name: string) =>
      unwrap(
        await api.DELETE("/api/v1/projects/{id}/secrets/{name}/", {
          params: { path: { id: project!, name } },
        }),
      ),
    ["secrets"],
  );
  if (!can("secret", "read")) return <Forbidden text={t("secret.noRole")} />;
  const mayWrite = can("secret", "update");
  const mayDelete = can("secret", "delete");
  return (
    <Section
      title="nav.secrets"
      extra={<CreateButton allowed={mayWrite && !!project} onClick={() => setEditing("new")} label="secret.new" testId="secret-create" />}
    >
      <Space wrap style={{ marginBottom: 12 }}>
        <Typography.Text>{t("common.project")}</Typography.Text>
        <Select
          aria-label={t("common.project")}
          data-testid="secret-project"
          style={{ minWidth: 180 }}
          value={project ?? undefined}
          onChange={setPicked}
          options={(projects.data ?? []).map((p) => ({ value: p.id, label: p.slug }))}
        />
      </Space>
      <Typography.Paragraph type="secondary">{t("secret.help")}</Typography.Paragraph>
      {project ? (
        <ListTable<Secret>
          query={list}
          rowKey="name"
          empty={t(mayWrite ? "secret.empty" : "secret.emptyViewer")}
          columns={[
            { title: t("common.name"), dataIndex: "name", render: (n: string) => <code>{n}</code> },
            { title: t("secret.version"), dataIndex: "version", render: (v: number) => <Tag>v{v}</Tag> },
            { title: t("secret.updated"), dataIndex: "updated_at", render: fmtTime },
            { title: t("secret.updatedBy"), dataIndex: "updated_by", render: byWhom },
            ...(mayWrite || mayDelete
              ? [
                  {
                    title: t("common.actions"),
                    render: (_: unknown, s: Secret) => (
                      <Space>
                        {mayWrite && (
                          <a role="button" onClick={() => setEditing(s.name)} data-testid={`secret-replace-${s.name}`}>
                            {t("secret.replace")}
                          </a>
                        )}
                        {mayDelete && <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(s.name)} />}
                      </Space>
                    ),
                  },
                ]
              : []),
          ]}
        />
      ) : (
        <EmptyState>{t("secret.noProject")}</EmptyState>
      )}
      {/* keyed: a closed dialog is gone at once, with what was typed in it */}
      <CreateModal<{ name: string; value: string }>
        key={editing ?? "closed"}
        title={editing === "new" ? t("secret.new") : `${t("secret.replace")}: ${editing ?? ""}`}
        open={editing != null}
        onClose={() => setEditing(null)}
        initial={editing && editing !== "new" ? { name: editing } : {}}
        onSubmit={async (v) => {
          const name = editing === "new" ? v.name : editing!;
          const saved = unwrap(
            await api.PUT("/api/v1/projects/{id}/secrets/{name}/", {
              params: { path: { id: project!, name } },
              body: { value: v.value },
            }),
          );
          message.success(`${t("secret.saved")}: ${saved.name} (v${saved.version})`);
          qc.invalidateQueries({ queryKey: ["secrets"] });
        }}
      >
        <Form.Item
          label={t("common.name")}
          name="name"
          extra={t("secret.nameHelp")}
          rules={[{ required: true }, { pattern: SECRET_NAME, message: t("secret.nameHelp") }]}
        >
          <Input disabled={editing !== "new"} autoComplete="off" data-testid="secret-name" />
        </Form.Item>
        <Form.Item label={t("secret.value")} name="value" extra={t("secret.valueHelp")} rules={[{ required: true }]}>
          <Input.Password visibilityToggle={false} autoComplete="new-password" data-testid="secret-value" />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}
