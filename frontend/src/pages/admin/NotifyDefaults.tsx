// The tenant's notification defaults (/console/notifications): what every member who has made
// no subscription of their own is told of their own jobs, by e-mail (their account's address)
// or on the bell. Every member reads them; admins set and remove them.
import { useState } from "react";
import { Form, Select, Space, Tag, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { EVENTS } from "../Subscriptions";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, useMutate } from "./parts";

type Default = Schemas["NotificationDefault"];
type Body = { channel: "email" | "inapp"; events: Schemas["NotificationEventEnum"][] };

export function NotifyDefaults() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const qc = useQueryClient();
  const [editing, setEditing] = useState<Body | null>(null);
  const list = useQuery({
    queryKey: ["notification-defaults", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/notification-defaults/", { params: { query: { tenant: tenant!.id } } })).results,
  });
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/notification-defaults/{id}/", { params: { path: { id } } })),
    ["notification-defaults"],
  );
  const mayWrite = can("notification_default", "create");
  return (
    <Section
      title="nav.notifyDefaults"
      extra={<CreateButton allowed={mayWrite} onClick={() => setEditing({ channel: "email", events: ["failed"] })} testId="default-create" />}
    >
      <Typography.Paragraph type="secondary">{t("defaults.help")}</Typography.Paragraph>
      <ListTable<Default>
        query={list}
        empty={t("defaults.empty")}
        columns={[
          { title: t("subs.channel"), dataIndex: "channel" },
          { title: t("subs.events"), dataIndex: "events", render: (e: string[]) => e.map((x) => <Tag key={x}>{x}</Tag>) },
          ...(mayWrite
            ? [
                {
                  title: t("common.actions"),
                  render: (_: unknown, d: Default) => (
                    <Space>
                      <a role="button" data-testid={`default-edit-${d.channel}`} onClick={() => setEditing({ channel: d.channel, events: d.events })}>
                        {t("common.edit")}
                      </a>
                      <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(d.id)} />
                    </Space>
                  ),
                },
              ]
            : []),
        ]}
      />
      <CreateModal<Body>
        key={editing ? `${editing.channel}` : "closed"}
        title={t("nav.notifyDefaults")}
        open={!!editing}
        onClose={() => setEditing(null)}
        initial={editing ?? undefined}
        onSubmit={async (v) => {
          unwrap(await api.POST("/api/v1/notification-defaults/", { body: { ...v, tenant: tenant!.id } }));
          qc.invalidateQueries({ queryKey: ["notification-defaults"] });
        }}
      >
        <Form.Item label={t("subs.channel")} name="channel" rules={[{ required: true }]}>
          <Select aria-label={t("subs.channel")} options={["email", "inapp"].map((c) => ({ value: c, label: c }))} />
        </Form.Item>
        <Form.Item label={t("subs.events")} name="events" rules={[{ required: true }]}>
          <Select mode="multiple" aria-label={t("subs.events")} options={EVENTS.map((e) => ({ value: e, label: e }))} />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}
