// A dataset's versions (its expanded row): the upload, two versions compared, the versions table.
import { useState } from "react";
import { Button, InputNumber, List, Space, Table, Tag, Typography } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { ErrorState, fmtTime } from "../../components/common";
import { DatasetUpload } from "./DatasetUpload";

const size = (n: number) =>
  n >= 1e9 ? `${(n / 1e9).toFixed(1)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`;

function DatasetCompare({ id, latest }: { id: string; latest: number }) {
  const { t } = useI18n();
  const [a, setA] = useState<number | null>(latest > 1 ? latest - 1 : null);
  const [b, setB] = useState<number | null>(latest > 1 ? latest : null);
  const [pair, setPair] = useState<[number, number] | null>(null);
  const q = useQuery({
    queryKey: ["dataset-compare", id, pair],
    enabled: !!pair,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/datasets/{id}/compare/", { params: { path: { id }, query: { a: pair![0], b: pair![1] } } })),
  });
  const section = (title: string, color: string, paths: string[]) =>
    paths.length > 0 && (
      <List
        size="small"
        header={<strong>{`${title} (${paths.length})`}</strong>}
        dataSource={paths}
        renderItem={(p) => (
          <List.Item>
            <Tag color={color}>{title}</Tag>
            <code>{p}</code>
          </List.Item>
        )}
      />
    );
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Space>
        <InputNumber min={1} value={a} onChange={setA} aria-label={t("catalog.compareA")} data-testid="compare-a" />
        <InputNumber min={1} value={b} onChange={setB} aria-label={t("catalog.compareB")} data-testid="compare-b" />
        <Button disabled={!a || !b} onClick={() => a && b && setPair([a, b])} data-testid="compare-go">
          {t("catalog.compare")}
        </Button>
      </Space>
      {q.error ? (
        <ErrorState error={q.error} />
      ) : (
        q.data && (
          <div data-testid="compare-result">
            {section(t("catalog.added"), "green", q.data.added)}
            {section(t("catalog.removed"), "red", q.data.removed)}
            {section(t("catalog.changed"), "orange", q.data.changed)}
            <Typography.Text>{t("catalog.unchanged").replace("{n}", String(q.data.unchanged))}</Typography.Text>
          </div>
        )
      )}
    </Space>
  );
}

export function DatasetVersions({ id, latest }: { id: string; latest: number }) {
  const { t } = useI18n();
  const { can } = useSession();
  const q = useQuery({
    queryKey: ["dataset-versions", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/datasets/{dataset_pk}/versions/", { params: { path: { dataset_pk: id }, query: { page_size: 100 } } }))
        .results,
  });
  if (q.error) return <ErrorState error={q.error} />;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      {can("dataset", "upload") && can("dataset", "commit") && (
        <DatasetUpload id={id} open={q.data?.find((v) => v.state === "open")?.number ?? null} />
      )}
      <DatasetCompare id={id} latest={latest} />
      <Table<Schemas["DatasetVersion"]>
        rowKey="id"
        size="small"
        pagination={false}
        loading={q.isLoading}
        dataSource={q.data}
        columns={[
          { title: "#", dataIndex: "number" },
          { title: t("common.state"), dataIndex: "state", render: (s: string) => <Tag>{s}</Tag> },
          { title: t("catalog.files"), dataIndex: "file_count" },
          { title: t("catalog.size"), dataIndex: "size_bytes", render: size },
          { title: "sha256", dataIndex: "manifest_sha256", render: (s: string) => <code>{s?.slice(0, 12)}</code> },
          { title: t("common.created"), dataIndex: "created_at", render: fmtTime },
        ]}
      />
    </Space>
  );
}
