// A catalogue page (datasets, models): the tenant's rows (the chosen project's), each expandable,
// the archived ones instead with "Show archived", archive and restore for roles that may.
import { useState, type ReactNode } from "react";
import type { ColumnsType } from "antd/es/table";
import { Space, Table, Typography } from "antd";
import { useQuery } from "@tanstack/react-query";
import { useI18n, type Key } from "../../i18n";
import { useSession } from "../../session";
import { EmptyState, ErrorState, fmtTime } from "../../components/common";
import { ArchiveButton, NameWithBadge, RestoreButton, ShowArchived, useMayArchive } from "../../components/Archive";

/** A catalogue page: the tenant's rows (the chosen project's), each expandable; the archived
 * ones instead with "Show archived". */
export function CatalogPage<T extends { id: string; name: string; tenant?: string; tenant_id?: string; archived_at?: string | null }>({
  kind,
  title,
  empty,
  queryKey,
  fetch,
  expanded,
  columns,
}: {
  kind: "dataset" | "model";
  title: Key;
  empty: Key;
  queryKey: string;
  fetch: (project: string | undefined, archived: boolean) => Promise<T[]>;
  expanded: (row: T) => ReactNode;
  columns: ColumnsType<T>;
}) {
  const { t } = useI18n();
  const { tenant, project } = useSession();
  const mayArchive = useMayArchive();
  const [archived, setArchived] = useState(false);
  const q = useQuery({
    queryKey: [queryKey, tenant?.id, project, archived],
    enabled: !!tenant,
    queryFn: async () =>
      (await fetch(project ?? undefined, archived)).filter((x) => (x.tenant ?? x.tenant_id) === tenant!.id),
  });
  const actions = mayArchive(kind) || mayArchive(kind, "restore");
  return (
    <div>
      <Space style={{ width: "100%", justifyContent: "space-between" }}>
        <Typography.Title level={1} style={{ fontSize: 24 }}>
          {t(title)}
        </Typography.Title>
        <ShowArchived checked={archived} onChange={setArchived} />
      </Space>
      {q.error ? (
        <ErrorState error={q.error} onRetry={() => q.refetch()} />
      ) : (
        <Table<T>
          rowKey="id"
          size="small"
          loading={q.isLoading}
          dataSource={q.data}
          locale={{ emptyText: <EmptyState>{t(archived ? "archive.empty" : empty)}</EmptyState> }}
          expandable={{ expandedRowRender: expanded }}
          columns={[
            {
              title: t("common.name"),
              dataIndex: "name",
              render: (n: string, row) => <NameWithBadge name={n} archivedAt={row.archived_at} />,
            },
            { title: t("common.project"), dataIndex: "project_slug" },
            { title: t("catalog.latest"), dataIndex: "latest_version" },
            ...columns,
            { title: t("common.user"), dataIndex: "created_by" },
            { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
            ...(actions
              ? [
                  {
                    title: t("common.actions"),
                    key: "actions",
                    render: (_: unknown, row: T) =>
                      row.archived_at
                        ? mayArchive(kind, "restore") && <RestoreButton kind={kind} id={row.id} name={row.name} size="small" />
                        : mayArchive(kind) && <ArchiveButton kind={kind} id={row.id} name={row.name} size="small" />,
                  },
                ]
              : []),
          ]}
        />
      )}
    </div>
  );
}
