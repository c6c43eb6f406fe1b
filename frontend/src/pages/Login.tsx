// The sign-in page (/login), with the language switch.
import { useState } from "react";
import { useNavigate, useSearchParams } from "react-router-dom";
import { Alert, Button, Card, Form, Input, Space } from "antd";
import { useQueryClient } from "@tanstack/react-query";
import { api, ApiError, unwrap } from "../api/client";
import { useI18n } from "../i18n";
import { LangSwitch } from "../components/LangSwitch";

export function LoginPage() {
  const { t } = useI18n();
  const qc = useQueryClient();
  const nav = useNavigate();
  const [params] = useSearchParams();
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const next = params.get("next");
  const [expired] = useState(() => {
    const was = sessionStorage.getItem("torus.expired") === "1";
    sessionStorage.removeItem("torus.expired");
    return was;
  });
  const safeNext = next && next.startsWith("/") && !next.startsWith("//") ? next : "/";

  const onFinish = async (v: { username: string; password: string }) => {
    setBusy(true);
    setError(null);
    try {
      await api.GET("/api/v1/auth/csrf"); // sets the csrftoken cookie
      const me = unwrap(await api.POST("/api/v1/auth/login", { body: v }));
      qc.setQueryData(["me"], me);
      nav(safeNext, { replace: true });
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };

  return (
    <main style={{ display: "flex", justifyContent: "center", paddingTop: "12vh" }}>
      <Card title={<h1 style={{ margin: 0, fontSize: 20 }}>Torus — {t("auth.signin")}</h1>} style={{ width: 380 }}
        extra={<LangSwitch />}>
        {expired && <Alert type="info" role="status" message={t("auth.expired")} style={{ marginBottom: 16 }} />}
        <Form layout="vertical" onFinish={onFinish} requiredMark={false}>
          <Form.Item label={t("auth.username")} name="username" rules={[{ required: true }]}>
            <Input autoComplete="username" autoFocus data-testid="login-username" />
          </Form.Item>
          <Form.Item label={t("auth.password")} name="password" rules={[{ required: true }]}>
            <Input.Password autoComplete="current-password" data-testid="login-password" />
          </Form.Item>
          {error && (
            <Alert type="error" role="alert" message={t("auth.failed")} description={error} style={{ marginBottom: 16 }} />
          )}
          <Space>
            <Button type="primary" htmlType="submit" loading={busy} data-testid="login-submit">
              {t("auth.signin")}
            </Button>
          </Space>
        </Form>
      </Card>
    </main>
  );
}
