// The home page (/): my running and waiting jobs, GPUs in use against the quota, GPUs over time.
import { Button, Card, Col, List, Progress, Row, Statistic, Typography } from "antd";
import { Link } from "react-router-dom";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { ACTIVE_STATES, EmptyState, ErrorState, Loading, StateTag } from "../components/common";
import { UtilisationChart } from "../components/UtilisationChart";
import { useLiveJobs } from "../components/useJobSocket";

export default function HomePage() {
  const { t } = useI18n();
  const { me, tenant, project, can } = useSession();
  const username = me?.user?.username ?? "";
  const jobs = useQuery({
    queryKey: ["jobs", "mine-active", tenant?.id, project, username],
    enabled: !!tenant,
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
  useLiveJobs(tenant?.id, project, ["jobs", "mine-active"]); // pushed, not polled
  const quotas = useQuery({
    queryKey: ["quotas", tenant?.id],
    enabled: !!tenant,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/quotas/", { params: { query: { page_size: 500 } } })).results,
  });

  if (!tenant) return <EmptyState>{t("common.noTenant")}</EmptyState>;
  const running = (jobs.data ?? []).filter((j) => j.state === "RUNNING" || j.state === "RESTARTING");
  const gpusInUse = running.reduce((s, j) => s + j.gpus, 0);
  const tenantQuota = (quotas.data ?? []).find((q) => q.tenant_id === tenant.id && q.scope === "tenant");
  const gpuLimit = tenantQuota?.gpus ?? null;

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
            <UtilisationChart tenantId={tenant.id} project={project} quota={gpuLimit} groups={["tenant"]} height={180} />
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
