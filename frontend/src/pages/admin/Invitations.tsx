// Invitations to the tenant (/console/invitations): sent with a role, the link shown once, revoked.
import { useState } from "react";
import { Button, Form, Input, Select, Tag } from "antd";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { Forbidden, fmtTime } from "../../components/common";
import { CreateButton, CreateModal, ListTable, ROLES, Section, ShownOnce, useMutate, useTenantList } from "./parts";

export function Invitations() {
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
