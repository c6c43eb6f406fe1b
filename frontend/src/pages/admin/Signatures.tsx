// Failure signatures (/console/signatures): the patterns, the jobs each matched and their trend.
import { useState } from "react";
import { Card, Form, Input } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { ConfirmButton, CreateButton, CreateModal, ListTable, Section, useMutate, useTenantList } from "./parts";
import { SignatureTrend } from "./SignatureTrend";

export function Signatures() {
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
