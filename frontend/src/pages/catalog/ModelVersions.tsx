// A model's versions (its expanded row): stage, aliases, source job, lineage and alias moves.
import { useState } from "react";
import { Button, Space, Table, Tag } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { ErrorState } from "../../components/common";
import { AliasHistory, AliasMove, AliasTag } from "./Aliases";
import { ModelLineage } from "./ModelLineage";

export function ModelVersions({ id }: { id: string }) {
  const { t } = useI18n();
  const { can } = useSession();
  const [shown, setShown] = useState<number | null>(null);
  const q = useQuery({
    queryKey: ["model-versions", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/{id}/versions/", { params: { path: { id }, query: { page_size: 100 } } })).results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Table<Schemas["ModelVersionRow"]>
        rowKey="id"
        size="small"
        pagination={false}
        loading={q.isLoading}
        dataSource={q.data}
        columns={[
          { title: "#", dataIndex: "number" },
          { title: t("common.state"), dataIndex: "state", render: (s: string) => <Tag>{s}</Tag> },
          { title: t("catalog.stage"), dataIndex: "stage" },
          {
            title: t("catalog.aliases"),
            dataIndex: "aliases",
            render: (a: string[]) =>
              a.map((x) => (can("model", "alias") ? <AliasTag key={x} id={id} alias={x} /> : <Tag key={x}>{x}</Tag>)),
          },
          { title: "framework", dataIndex: "framework" },
          { title: t("catalog.files"), dataIndex: "file_count" },
          {
            title: t("job.title"),
            dataIndex: "source_job",
            render: (j: string | null) => (j ? <a href={`/jobs/${j}`}>{j.slice(0, 8)}</a> : "—"),
          },
          {
            title: t("lineage.title"),
            dataIndex: "number",
            key: "lineage",
            render: (n: number) => (
              <Button size="small" onClick={() => setShown(shown === n ? null : n)} data-testid={`lineage-${n}`}>
                {t("lineage.show")}
              </Button>
            ),
          },
          ...(can("model", "alias")
            ? [{ title: t("alias.move"), dataIndex: "number", key: "alias", render: (n: number) => <AliasMove id={id} n={n} /> }]
            : []),
        ]}
      />
      {shown !== null && <ModelLineage id={id} n={shown} />}
      <AliasHistory id={id} />
    </Space>
  );
}
