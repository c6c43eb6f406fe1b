// A deployment's traffic from the gateway's per-minute records (GET .../usage/): request rate
// (and errors), latency p50/p95 (and time to first token), tokens in and out per minute.
import { useMemo } from "react";
import { Card, Col, Row, Segmented, Space, Statistic } from "antd";
import dayjs from "dayjs";
import { Chart } from "../../components/Chart";
import { EmptyState, ErrorState, Loading } from "../../components/common";
import { useI18n } from "../../i18n";
import { useUsage } from "./parts";
import type { Usage } from "./types";

export const RANGES = [60, 360, 1440];

function line(name: string, data: (number | null)[], extra: object = {}) {
  return { name, type: "line", showSymbol: false, connectNulls: false, data, ...extra };
}

// latency has no value in a minute without requests: each minute with one is a point (a lone
// minute has no line to show it; ECharts would otherwise skip symbols between axis labels)
function points(name: string, data: (number | null)[], extra: object = {}) {
  return line(name, data, { showSymbol: true, showAllSymbol: true, symbolSize: 5, ...extra });
}

export function usageOptions(usage: Usage, names: Record<string, string>) {
  const x = usage.series.map((p) => dayjs(p.t).format(usage.minutes > 360 ? "MM-DD HH:mm" : "HH:mm"));
  const base = (series: object[], unit: string) => ({
    animation: false,
    tooltip: { trigger: "axis" },
    legend: { top: 0, right: 0 },
    grid: { left: 56, right: 16, top: 48, bottom: 28 },
    xAxis: { type: "category", data: x, boundaryGap: false },
    yAxis: { type: "value", name: unit, min: 0 },
    series,
  });
  const s = usage.series;
  return {
    rate: base(
      [
        line(names.rate, s.map((p) => p.requests_per_s), { areaStyle: {} }),
        line(names.errors, s.map((p) => p.errors / usage.step_s), { color: "#cf1322" }),
      ],
      "req/s",
    ),
    latency: base(
      [
        points("p50", s.map((p) => p.latency_p50_ms)),
        points("p95", s.map((p) => p.latency_p95_ms)),
        points(`${names.ttft} p50`, s.map((p) => p.ttft_p50_ms), { lineStyle: { type: "dashed" } }),
      ],
      "ms",
    ),
    tokens: base(
      [
        line(names.tokensIn, s.map((p) => p.tokens_in_per_min)),
        line(names.tokensOut, s.map((p) => p.tokens_out_per_min)),
      ],
      "tokens/min",
    ),
  };
}

export function UsageCharts({ id, minutes, setMinutes }: { id: string; minutes: number; setMinutes: (m: number) => void }) {
  const { t } = useI18n();
  const usage = useUsage(id, minutes);
  const names = useMemo(
    () => ({
      rate: t("dep.rate"),
      errors: t("dep.errors"),
      ttft: t("dep.ttft"),
      tokensIn: t("dep.tokensIn"),
      tokensOut: t("dep.tokensOut"),
    }),
    [t],
  );
  const options = useMemo(() => (usage.data ? usageOptions(usage.data, names) : null), [usage.data, names]);
  const range = (
    <Segmented
      aria-label={t("dep.range")}
      value={minutes}
      onChange={(v) => setMinutes(Number(v))}
      options={RANGES.map((m) => ({ value: m, label: m >= 60 ? `${m / 60} h` : `${m} min` }))}
    />
  );
  if (usage.error) return <ErrorState error={usage.error} onRetry={() => usage.refetch()} />;
  if (!usage.data || !options) return <Loading />;
  const totals = usage.data.totals;
  const ms = (v: number | null) => (v == null ? "—" : `${Math.round(v)} ms`);
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      <Space wrap size="large">
        {range}
        <Statistic title={t("dep.requests")} value={totals.requests} valueStyle={{ fontSize: 18 }} />
        <Statistic title={t("dep.errors")} value={totals.errors} valueStyle={{ fontSize: 18 }} />
        <Statistic title="p50" value={ms(totals.latency_p50_ms)} valueStyle={{ fontSize: 18 }} />
        <Statistic title="p95" value={ms(totals.latency_p95_ms)} valueStyle={{ fontSize: 18 }} />
        <Statistic title={t("dep.tokensIn")} value={totals.tokens_in} valueStyle={{ fontSize: 18 }} />
        <Statistic title={t("dep.tokensOut")} value={totals.tokens_out} valueStyle={{ fontSize: 18 }} />
      </Space>
      {totals.requests === 0 ? (
        <EmptyState>
          <span data-testid="usage-empty">{t("dep.noTraffic")}</span>
        </EmptyState>
      ) : (
        <Row gutter={[12, 12]}>
          <Col xs={24} xl={8}>
            <Card size="small" title={t("dep.rateChart")}>
              <div data-testid="usage-rate">
                <Chart option={options.rate} height={220} label={t("dep.rateChart")} />
              </div>
            </Card>
          </Col>
          <Col xs={24} xl={8}>
            <Card size="small" title={t("dep.latencyChart")}>
              <div data-testid="usage-latency">
                <Chart option={options.latency} height={220} label={t("dep.latencyChart")} />
              </div>
            </Card>
          </Col>
          <Col xs={24} xl={8}>
            <Card size="small" title={t("dep.tokensChart")}>
              <div data-testid="usage-tokens">
                <Chart option={options.tokens} height={220} label={t("dep.tokensChart")} />
              </div>
            </Card>
          </Col>
        </Row>
      )}
    </Space>
  );
}
