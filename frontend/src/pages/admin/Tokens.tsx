// Access tokens (/console/tokens): created (the token shown once), listed and revoked.
import { useState } from "react";
import { DatePicker, Form, Input, Switch, Tag } from "antd";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { fmtTime } from "../../components/common";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, ShownOnce, useMutate, useTenantList } from "./parts";

export function Tokens() {
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
