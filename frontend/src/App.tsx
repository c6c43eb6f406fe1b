// The shell: the sign-in gate, the navigation, the tenant and project switchers, and the routes.
import { lazy, Suspense } from "react";
import { Link, Navigate, Route, Routes, useLocation, useNavigate } from "react-router-dom";
import { Button, Layout, Menu, Select, Space, Typography } from "antd";
import { useQueryClient } from "@tanstack/react-query";
import { api } from "./api/client";
import { useI18n, type Key } from "./i18n";
import { useSession } from "./session";
import { Loading } from "./components/common";
import { ErrorBoundary } from "./components/ErrorBoundary";
import { LangSwitch } from "./components/LangSwitch";
import { Bell } from "./components/Bell";
import { useProjects } from "./projects";
import { LoginPage } from "./pages/Login";
import { InviteAcceptPage } from "./pages/InviteAccept";

const HomePage = lazy(() => import("./pages/Home"));
const JobsPage = lazy(() => import("./pages/Jobs"));
const SubmitPage = lazy(() => import("./pages/Submit"));
const JobPage = lazy(() => import("./pages/Job"));
const LogSearchPage = lazy(() => import("./pages/LogSearch"));
const AdminPage = lazy(() => import("./pages/admin/Admin"));
const ClustersPage = lazy(() => import("./pages/Clusters"));
const SubscriptionsPage = lazy(() => import("./pages/Subscriptions"));
const DatasetsPage = lazy(() => import("./pages/catalog/Datasets").then((m) => ({ default: m.DatasetsPage })));
const ModelsPage = lazy(() => import("./pages/catalog/Models").then((m) => ({ default: m.ModelsPage })));
const DeploymentsPage = lazy(() => import("./pages/deployments/List"));
const DeploymentPage = lazy(() => import("./pages/deployments/Detail"));
const DeployPage = lazy(() => import("./pages/deployments/Deploy"));

function Switchers() {
  const { t } = useI18n();
  const { tenants, tenant, setTenant, project, setProject } = useSession();
  const projects = useProjects();
  return (
    <Space wrap>
      <Select
        aria-label={t("common.tenant")}
        data-testid="tenant-switcher"
        style={{ minWidth: 150 }}
        value={tenant?.id}
        onChange={setTenant}
        options={tenants.map((x) => ({ value: x.id, label: `${x.name} (${x.role})` }))}
      />
      <Select
        aria-label={t("common.project")}
        data-testid="project-switcher"
        style={{ minWidth: 160 }}
        value={project ?? ""}
        onChange={(v) => setProject(v || null)}
        options={[
          { value: "", label: t("common.allProjects") },
          ...(projects.data ?? []).map((p) => ({ value: p.id, label: p.slug })),
        ]}
      />
    </Space>
  );
}

function Shell() {
  const { t } = useI18n();
  const { me, can, tenants } = useSession();
  const loc = useLocation();
  const nav = useNavigate();
  const qc = useQueryClient();
  const item = (path: string, key: Key) => ({ key: path, label: <Link to={path}>{t(key)}</Link> });
  const admin = can("invitation", "read");
  const items = [
    item("/", "nav.home"),
    item("/jobs", "nav.jobs"),
    ...(can("job", "create") ? [item("/jobs/new", "nav.submit")] : []),
    item("/logs", "nav.logs"),
    ...(can("dataset", "read") ? [item("/datasets", "nav.datasets")] : []),
    ...(can("model", "read") ? [item("/models", "nav.models")] : []),
    ...(can("deployment", "read") ? [item("/deployments", "nav.deployments")] : []),
    item("/clusters", "nav.clusters"),
    {
      key: "admin",
      label: t("nav.admin"),
      type: "group" as const,
      children: [
        ...(admin ? [item("/console/members", "nav.members"), item("/console/invitations", "nav.invitations")] : []),
        item("/console/projects", "nav.projects"),
        ...(can("secret", "read") ? [item("/console/secrets", "nav.secrets")] : []),
        item("/console/quotas", "nav.quotas"),
        item("/console/tokens", "nav.tokens"),
        ...(can("audit-event", "read") ? [item("/console/audit", "nav.audit")] : []),
        item("/console/signatures", "nav.signatures"),
        ...(can("webhook", "read") ? [item("/console/webhooks", "nav.webhooks")] : []),
        item("/console/notifications", "nav.notifyDefaults"),
      ],
    },
  ];
  const selected =
    ["/jobs/new", "/jobs", "/logs", "/datasets", "/models", "/deployments", "/clusters", "/console/members", "/console/invitations", "/console/projects", "/console/secrets", "/console/quotas",
      "/console/tokens", "/console/audit", "/console/signatures", "/console/webhooks", "/console/notifications"].find((p) => loc.pathname.startsWith(p)) ?? "/";
  const signOut = async () => {
    await api.POST("/api/v1/auth/logout");
    qc.removeQueries({ predicate: (q) => q.queryKey[0] !== "me" });
    qc.setQueryData(["me"], null);
    nav("/login");
  };
  return (
    <Layout style={{ minHeight: "100vh" }}>
      <a href="#main" className="skip-link">
        {t("nav.skip")}
      </a>
      <Layout.Sider breakpoint="lg" collapsedWidth={0} theme="light" width={210}>
        <nav aria-label="Torus">
          <div style={{ padding: "16px 24px", fontWeight: 700, fontSize: 20 }}>
            <Link to="/">Torus</Link>
          </div>
          <Menu mode="inline" selectedKeys={[selected]} items={items} />
        </nav>
      </Layout.Sider>
      <Layout>
        <Layout.Header
          style={{ background: "#fff", display: "flex", alignItems: "center", justifyContent: "space-between", gap: 8 }}
        >
          {tenants.length ? <Switchers /> : <span />}
          <Space>
            <Bell />
            <LangSwitch />
            <Typography.Text data-testid="whoami">{me?.user?.username}</Typography.Text>
            <Button onClick={signOut} data-testid="sign-out">
              {t("auth.signout")}
            </Button>
          </Space>
        </Layout.Header>
        <Layout.Content id="main" tabIndex={-1} style={{ margin: 16 }}>
          <ErrorBoundary resetKey={loc.pathname}>
          <Suspense fallback={<Loading />}>
              <Routes>
                <Route path="/" element={<HomePage />} />
                <Route path="/jobs" element={<JobsPage />} />
                <Route path="/jobs/new" element={<SubmitPage />} />
                <Route path="/jobs/:id" element={<JobPage />} />
                <Route path="/logs" element={<LogSearchPage />} />
                <Route path="/datasets" element={<DatasetsPage />} />
                <Route path="/models" element={<ModelsPage />} />
                <Route path="/deployments" element={<DeploymentsPage />} />
                <Route path="/deployments/new" element={<DeployPage />} />
                <Route path="/deployments/:id" element={<DeploymentPage />} />
                <Route path="/clusters" element={<ClustersPage />} />
                <Route path="/notifications" element={<SubscriptionsPage />} />
                <Route path="/invitations/accept" element={<InviteAcceptPage />} />
                <Route path="/console/:section" element={<AdminPage />} />
                <Route path="*" element={<Navigate to="/" replace />} />
              </Routes>
          </Suspense>
          </ErrorBoundary>
        </Layout.Content>
      </Layout>
    </Layout>
  );
}

export function App() {
  const { me, loading } = useSession();
  const loc = useLocation();
  if (loading) return <Loading />;
  if (!me) {
    if (loc.pathname === "/login") return <LoginPage />;
    const next = loc.pathname + loc.search;
    return <Navigate to={`/login?next=${encodeURIComponent(next)}`} replace />;
  }
  if (loc.pathname === "/login") return <Navigate to="/" replace />;
  return <Shell />;
}
