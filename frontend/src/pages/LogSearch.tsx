// Log search across the tenant's jobs (/logs): filters, histogram, highlighted hits linked to the job's log.
import { useState } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { Card, Input, List, Select, Space, Tag, Typography } from "antd";
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { EmptyState, ErrorState, fmtTime } from "../components/common";
import { Chart } from "../components/Chart";
import { Highlight } from "../components/Highlight";

const LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];

export default function LogSearchPage() {
  const { t } = useI18n();
  const { project, tenant } = useSession();
  const [params, setParams] = useSearchParams();
  const q = params.get("q") ?? "";
  const level = params.get("level") ?? "";
  const stream = params.get("stream") ?? "";
  const [after, setAfter] = useState<string | undefined>();
  const set = (k: string, v: string) => {
    const next = new URLSearchParams(params);
    if (v) next.set(k, v);
    else next.delete(k);
    setParams(next, { replace: true });
    setAfter(undefined);
  };
  const query = {
    q: q || undefined,
    level: level || undefined,
    stream: (stream || undefined) as "stdout" | "stderr" | undefined,
    project: project ?? undefined,
    histogram: true,
    size: 100,
    after,
  };
  const res = useQuery({
    queryKey: ["log-search", tenant?.id, query],
    enabled: !!tenant && (!!q || !!level),
    placeholderData: keepPreviousData,
    queryFn: async () => unwrap(await api.GET("/api/v1/logs/search/", { params: { query } })),
  });
  const hist = res.data?.histogram ?? [];

  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>{t("logs.title")}</Typography.Title>
      <Space wrap style={{ marginBottom: 12 }}>
        <Input.Search
          aria-label={t("logs.query")}
          placeholder={t("logs.query")}
          defaultValue={q}
          onSearch={(v) => set("q", v)}
          enterButton
          style={{ width: 380 }}
          data-testid="logsearch-input"
        />
        <Select
          aria-label={t("logs.level")}
          allowClear
          placeholder={t("logs.level")}
          value={level || undefined}
          onChange={(v?: string) => set("level", v ?? "")}
          options={LEVELS.map((l) => ({ value: l, label: l }))}
          style={{ width: 130 }}
        />
        <Select
          aria-label="stream"
          allowClear
          placeholder="stream"
          value={stream || undefined}
          onChange={(v?: string) => set("stream", v ?? "")}
          options={["stdout", "stderr"].map((l) => ({ value: l, label: l }))}
          style={{ width: 120 }}
        />
      </Space>
      {res.error ? (
        <ErrorState error={res.error} onRetry={() => res.refetch()} />
      ) : res.data ? (
        <>
          <Card size="small" style={{ marginBottom: 12 }}>
            <Typography.Text data-testid="logsearch-total">
              {res.data.total} {t("logs.hits")} · {res.data.took_ms} ms
            </Typography.Text>
            {hist.length > 0 && (
              <Chart
                label="histogram"
                height={140}
                option={{
                  animation: false,
                  grid: { left: 40, right: 16, top: 10, bottom: 24 },
                  tooltip: { trigger: "axis" },
                  xAxis: { type: "time" },
                  yAxis: { type: "value", minInterval: 1 },
                  series: [{ type: "bar", data: hist.map((b) => [b.time, b.count]) }],
                }}
              />
            )}
          </Card>
          {res.data.hits.length === 0 ? (
            <EmptyState>{t("logs.empty")}</EmptyState>
          ) : (
            <List
              size="small"
              dataSource={res.data.hits}
              data-testid="logsearch-hits"
              renderItem={(h) => (
                <List.Item
                  actions={[
                    <Link key="open" to={`/jobs/${h.job}?tab=logs&hit=${encodeURIComponent(h.id)}`}>
                      {t("logs.openInJob")}
                    </Link>,
                  ]}
                >
                  <Space direction="vertical" size={0} style={{ minWidth: 0 }}>
                    <Typography.Text type="secondary" style={{ fontSize: 12 }}>
                      {fmtTime(h.timestamp)} · #{h.attempt_number} {h.stream}
                      {h.node ? ` · ${h.node}` : ""} {h.level && <Tag>{h.level}</Tag>}
                    </Typography.Text>
                    <code style={{ whiteSpace: "pre-wrap", wordBreak: "break-all" }}>
                      <Highlight html={h.highlight} text={h.message} />
                    </code>
                  </Space>
                </List.Item>
              )}
            />
          )}
          {res.data.next && <a onClick={() => setAfter(res.data!.next!)}>{t("common.next")}</a>}
        </>
      ) : (
        <EmptyState>{t("logs.query")}</EmptyState>
      )}
    </div>
  );
}
