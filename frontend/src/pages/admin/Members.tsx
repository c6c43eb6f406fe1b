// The tenant's members (/console/members): their roles, changed or removed by whoever may.
import { Select, Tag } from "antd";
import type { ColumnsType } from "antd/es/table";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { fmtTime } from "../../components/common";
import { ConfirmButton, ListTable, ROLES, Section, useMutate } from "./parts";

export function Members() {
  const { t } = useI18n();
  const { tenant, can } = useSession();
  const list = useQuery({
    queryKey: ["memberships", tenant?.id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/memberships/", { params: { query: { tenant: tenant!.id, page_size: 500 } } })).results,
  });
  const setRole = useMutate(
    async ({ id, role }: { id: string; role: Schemas["TenantRoleEnum"] }) =>
      unwrap(await api.PATCH("/api/v1/memberships/{id}/", { params: { path: { id } }, body: { role } })),
    ["memberships"],
  );
  const remove = useMutate(
    async (id: string) => unwrap(await api.DELETE("/api/v1/memberships/{id}/", { params: { path: { id } } })),
    ["memberships"],
  );
  const admin = can("membership", "update");
  const columns: ColumnsType<Schemas["Membership"]> = [
    { title: t("common.user"), render: (_, m) => String((m.user_detail as Record<string, unknown>).username ?? "") },
    { title: t("admin.email"), render: (_, m) => String((m.user_detail as Record<string, unknown>).email ?? "") },
    {
      title: t("common.role"),
      render: (_, m) =>
        admin ? (
          <Select
            aria-label={t("common.role")}
            value={m.role}
            style={{ width: 120 }}
            onChange={(role) => setRole.mutate({ id: m.id, role })}
            options={ROLES.map((r) => ({ value: r, label: r }))}
          />
        ) : (
          <Tag>{m.role}</Tag>
        ),
    },
    { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
    ...(can("membership", "delete")
      ? [
          {
            title: t("common.actions"),
            render: (_: unknown, m: Schemas["Membership"]) => (
              <ConfirmButton label="common.delete" onConfirm={() => remove.mutate(m.id)} />
            ),
          },
        ]
      : []),
  ];
  return (
    <Section title="admin.members">
      <ListTable query={list} columns={columns} />
    </Section>
  );
}
