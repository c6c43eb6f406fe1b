// Webhooks (/console/webhooks): the registry's events sent to a URL, the signing secret shown
// once, each hook's deliveries.
import { useState } from "react";
import { Form, Input, Select, Tag } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { Forbidden, fmtTime } from "../../components/common";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, ShownOnce, useMutate, useTenantList } from "./parts";

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

export function Webhooks() {
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
