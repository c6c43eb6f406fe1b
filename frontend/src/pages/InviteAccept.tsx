// Accepting an invitation (/invitations/accept?token=), signed in.
import { useState } from "react";
import { useSearchParams } from "react-router-dom";
import { Alert, Button, Card, Form, Input } from "antd";
import { api, ApiError, unwrap, type Schemas } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";

export function InviteAcceptPage() {
  const { t } = useI18n();
  const { refresh, setTenant } = useSession();
  const [params] = useSearchParams();
  const [done, setDone] = useState<Schemas["InvitationAccepted"] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const onFinish = async (v: { token: string }) => {
    setError(null);
    try {
      const res = unwrap(await api.POST("/api/v1/invitations/accept/", { body: { token: v.token } }));
      setDone(res);
      refresh();
      setTenant(res.tenant_id);
    } catch (e) {
      setError(e instanceof ApiError ? e.message : String(e));
    }
  };
  return (
    <Card title={<h1 style={{ margin: 0, fontSize: 18 }}>{t("invite.title")}</h1>} style={{ maxWidth: 520 }}>
      {done ? (
        <Alert type="success" message={`${t("invite.done")} ${done.tenant_slug} (${done.role})`} />
      ) : (
        <Form layout="vertical" onFinish={onFinish} initialValues={{ token: params.get("token") ?? "" }}>
          <Form.Item label={t("invite.token")} name="token" rules={[{ required: true }]}>
            <Input />
          </Form.Item>
          {error && <Alert type="error" role="alert" message={error} style={{ marginBottom: 16 }} />}
          <Button type="primary" htmlType="submit">
            {t("invite.accept")}
          </Button>
        </Form>
      )}
    </Card>
  );
}
