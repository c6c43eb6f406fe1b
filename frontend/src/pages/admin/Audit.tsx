// The audit log (/console/audit): events filtered by action, actor and target, a cursor's pages.
import { useState } from "react";
import { Button, Input, Space, Tag } from "antd";
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { api, cursorOf, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { Forbidden, fmtTime } from "../../components/common";
import { ListTable, Section } from "./parts";

export function Audit() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const [filters, setFilters] = useState<{ action_prefix?: string; actor?: string; target_type?: string }>({});
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const query = { tenant: tenant?.id, ...filters, page_size: 50, cursor: cursors[cursors.length - 1] };
  const list = useQuery({
    queryKey: ["audit", query],
    enabled: can("audit-event", "read"),
    placeholderData: keepPreviousData,
    queryFn: async () => unwrap(await api.GET("/api/v1/audit-events/", { params: { query } })),
  });
  if (!can("audit-event", "read")) return <Forbidden text={t("admin.notAdmin")} />;
  const set = (k: keyof typeof filters) => (v: string) => {
    setFilters((f) => ({ ...f, [k]: v || undefined }));
    setCursors([undefined]);
  };
  return (
    <Section title="nav.audit">
      <Space wrap style={{ marginBottom: 12 }}>
        <Input.Search aria-label={t("admin.action")} placeholder={`${t("admin.action")} (job., token.…)`} allowClear onSearch={set("action_prefix")} />
        <Input.Search aria-label={t("admin.actor")} placeholder={t("admin.actor")} allowClear onSearch={set("actor")} />
        <Input.Search aria-label={t("admin.target")} placeholder={t("admin.target")} allowClear onSearch={set("target_type")} />
      </Space>
      <ListTable<Schemas["AuditEvent"]>
        query={list}
        rows={list.data?.results}
        pagination={false}
        columns={[
          { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
          { title: t("admin.actor"), dataIndex: "actor" },
          { title: t("admin.action"), dataIndex: "action", render: (a: string) => <Tag>{a}</Tag> },
          { title: t("admin.target"), render: (_, e) => `${e.target_type} ${e.target_repr}` },
          { title: "ip", dataIndex: "ip" },
        ]}
      />
      <Space style={{ marginTop: 12 }}>
        <Button disabled={cursors.length < 2} onClick={() => setCursors((c) => c.slice(0, -1))}>
          {t("common.prev")}
        </Button>
        <Button disabled={!list.data?.next} onClick={() => setCursors((c) => [...c, cursorOf(list.data?.next)])}>
          {t("common.next")}
        </Button>
      </Space>
    </Section>
  );
}
