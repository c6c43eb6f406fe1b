// My notification subscriptions (/notifications): what I am told about jobs, and where
// (docs/notifications.md). Each person sees and removes only their own; a webhook's signing
// secret is shown once, when it is made.
import { useState } from "react";
import { Alert, Form, Input, Select, Tag, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { useProjects } from "../projects";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, useMutate } from "./admin/parts";

type Subscription = Schemas["Subscription"];
type Event = Schemas["NotificationEventEnum"];
type Channel = Schemas["NotificationChannelEnum"];
export const EVENTS: Event[] = [
  "started", "succeeded", "failed", "restarting", "cancelled", "waiting_too_long", "stalled", "idle",
  "deploy_failing", "deploy_recovered",
];
const CHANNELS: Channel[] = ["inapp", "email", "webhook", "slack", "feishu", "dingtalk", "wecom"];
type Form = { events: Event[]; channel: Channel; address?: string; project?: string; job?: string };

export default function SubscriptionsPage() {
  const { t } = useI18n();
  const { tenant } = useSession();
  const qc = useQueryClient();
  const projects = useProjects();
  const [open, setOpen] = useState(false);
  const [secret, setSecret] = useState<string | null>(null);
  const [channel, setChannel] = useState<Channel>("inapp");
  const list = useQuery({
    queryKey: ["subscriptions", tenant?.id],
    queryFn: async () => unwrap(await api.GET("/api/v1/subscriptions/", { params: { query: { page_size: 500 } } })).results,
  });
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/subscriptions/{id}/", { params: { path: { id } } })),
    ["subscriptions"],
  );
  const slug = (id: string | null | undefined) => projects.data?.find((p) => p.id === id)?.slug ?? id;
  return (
    <Section title="subs.title" extra={<CreateButton allowed onClick={() => setOpen(true)} label="subs.new" testId="sub-create" />}>
      <Typography.Paragraph type="secondary">{t("subs.help")}</Typography.Paragraph>
      {secret && (
        <Alert type="warning" showIcon closable onClose={() => setSecret(null)} style={{ marginBottom: 12 }}
          message={t("subs.secret")} description={<code data-testid="sub-secret">{secret}</code>} />
      )}
      <ListTable<Subscription>
        query={list}
        empty={t("subs.empty")}
        columns={[
          {
            title: t("subs.scope"),
            render: (_: unknown, s: Subscription) =>
              s.job ? `${t("subs.job")} ${s.job}` : s.project ? `${t("common.project")} ${slug(s.project)}` : t("subs.mine"),
          },
          { title: t("subs.events"), dataIndex: "events", render: (e: string[]) => e.map((x) => <Tag key={x}>{x}</Tag>) },
          { title: t("subs.channel"), dataIndex: "channel" },
          { title: t("subs.address"), dataIndex: "address" },
          {
            title: t("subs.failing"),
            render: (_: unknown, s: Subscription) => (s.failing_since ? <Tag color="red">{s.last_error}</Tag> : null),
          },
          {
            title: t("common.actions"),
            render: (_: unknown, s: Subscription) => <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(s.id)} />,
          },
        ]}
      />
      <CreateModal<Form>
        title={t("subs.new")}
        open={open}
        onClose={() => setOpen(false)}
        initial={{ events: ["failed", "succeeded"], channel: "inapp" }}
        onSubmit={async (v) => {
          const body = { ...v, address: v.address ?? "", project: v.project || null, job: v.job || null };
          const made = unwrap(await api.POST("/api/v1/subscriptions/", { body }));
          if (made.secret) setSecret(made.secret);
          qc.invalidateQueries({ queryKey: ["subscriptions"] });
        }}
      >
        <Form.Item label={t("subs.events")} name="events" rules={[{ required: true }]}>
          <Select mode="multiple" aria-label={t("subs.events")} options={EVENTS.map((e) => ({ value: e, label: e }))} />
        </Form.Item>
        <Form.Item label={t("subs.channel")} name="channel" rules={[{ required: true }]}>
          <Select aria-label={t("subs.channel")} onChange={setChannel} options={CHANNELS.map((c) => ({ value: c, label: c }))} />
        </Form.Item>
        {channel !== "inapp" && (
          <Form.Item label={t("subs.address")} name="address" rules={[{ required: true }]} extra={t("subs.addressHelp")}>
            <Input />
          </Form.Item>
        )}
        <Form.Item label={t("common.project")} name="project" extra={t("subs.scopeHelp")}>
          <Select allowClear aria-label={t("common.project")} options={(projects.data ?? []).map((p) => ({ value: p.id, label: p.slug }))} />
        </Form.Item>
        <Form.Item label={t("subs.job")} name="job">
          <Input placeholder="job id" />
        </Form.Item>
      </CreateModal>
    </Section>
  );
}
