import { Button, Card, Col, List, Progress, Row, Statistic, Typography } from "antd";
import { Link } from "react-router-dom";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap, usageRows } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { ACTIVE_STATES, EmptyState, ErrorState, Loading, StateTag } from "../components/common";
import { Chart } from "../components/Chart";

function lastMonths(n: number): string[] {
  const out: string[] = [];
  const d = new Date();
  for (let i = n - 1; i >= 0; i--) {
    const m = new Date(d.getFullYear(), d.getMonth() - i, 1);
    out.push(`${m.getFullYear()}-${String(m.getMonth() + 1).padStart(2, "0")}`);
  }
  return out;
}

export default function HomePage() {
  const { t } = useI18n();
  const { me, tenant, project, can } = useSession();
  const username = me?.user?.username ?? "";
  const jobs = useQuery({
    queryKey: ["jobs", "mine-active", tenant?.id, project, username],
    enabled: !!tenant,
    refetchInterval: 10_000,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/jobs/", {
          params: {
            query: {
              tenant: tenant!.id,
              project: project ?? undefined,
              user: username,
              state: ACTIVE_STATES.join(","),
              page_size: 50,
            },
          },
        }),
      ).results,
  });
  const quotas = useQuery({
    queryKey: ["quotas", tenant?.id],
    enabled: !!tenant,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/quotas/", { params: { query: { page_size: 500 } } })).results,
  });
  const months = lastMonths(6);
  const usage = useQuery({
    queryKey: ["usage-months", tenant?.id, months.join()],
    enabled: !!tenant,
    queryFn: async () =>
      Promise.all(
        months.map(async (period) =>
          usageRows(unwrap(await api.GET("/api/v1/usage/", { params: { query: { period, group_by: "tenant" } } }))),
        ),
      ),
  });

  if (!tenant) return <EmptyState>{t("common.noTenant")}</EmptyState>;
  const running = (jobs.data ?? []).filter((j) => j.state === "RUNNING" || j.state === "RESTARTING");
  const gpusInUse = running.reduce((s, j) => s + j.gpus, 0);
  const tenantQuota = (quotas.data ?? []).find((q) => q.tenant_id === tenant.id && q.scope === "tenant");
  const gpuLimit = tenantQuota?.gpus ?? null;
  const usageSeries = (usage.data ?? []).map(
    (rows) => rows.filter((r) => r.tenant === tenant.slug).reduce((s, r) => s + r.gpu_hours, 0),
  );

  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>{t("home.title")}</Typography.Title>
      <Row gutter={[16, 16]}>
        <Col xs={24} md={8}>
          <Card>
            <Statistic title={t("home.gpus")} value={gpusInUse} suffix={gpuLimit != null ? `/ ${gpuLimit}` : ""} />
            {gpuLimit != null ? (
              <Progress percent={gpuLimit ? Math.round((100 * gpusInUse) / gpuLimit) : 0} aria-label={t("home.gpuQuota")} />
            ) : (
              <Typography.Text type="secondary">{t("home.noQuota")}</Typography.Text>
            )}
          </Card>
        </Col>
        <Col xs={24} md={16}>
          <Card title={t("home.usage")}>
            <Chart
              label={t("home.usage")}
              height={180}
              option={{
                grid: { left: 40, right: 16, top: 16, bottom: 24 },
                tooltip: { trigger: "axis" },
                xAxis: { type: "category", data: months },
                yAxis: { type: "value" },
                series: [{ type: "bar", data: usageSeries, name: "GPU h" }],
              }}
            />
          </Card>
        </Col>
        <Col span={24}>
          <Card title={t("home.myActive")}>
            {jobs.isLoading ? (
              <Loading />
            ) : jobs.error ? (
              <ErrorState error={jobs.error} onRetry={() => jobs.refetch()} />
            ) : !jobs.data?.length ? (
              <EmptyState
                action={
                  can("job", "create") && (
                    <Link to="/jobs/new">
                      <Button type="primary">{t("nav.submit")}</Button>
                    </Link>
                  )
                }
              >
                {t("home.noActive")}
              </EmptyState>
            ) : (
              <List
                dataSource={jobs.data}
                renderItem={(j) => (
                  <List.Item>
                    <List.Item.Meta
                      title={<Link to={`/jobs/${j.id}`}>{j.name}</Link>}
                      description={`${j.project_slug} · ${j.gpus} GPU · ${j.state_reason || ""}${
                        j.queue_position != null ? ` · #${j.queue_position}` : ""
                      }`}
                    />
                    <StateTag state={j.state} />
                  </List.Item>
                )}
              />
            )}
          </Card>
        </Col>
      </Row>
    </div>
  );
}
