// The deploy form: a registered model's version or alias, replicas, resources per replica,
// the engine's slots / context / KV cache type, scale to zero and limits. The fit estimate
// (the deploy's own check, asked as a dry run: nothing is written) shows beside the form as
// the fields change; the API's 400s land at their field.
import { useEffect, useRef, useState } from "react";
import { useNavigate } from "react-router-dom";
import { Alert, Button, Card, Col, Descriptions, Form, Input, InputNumber, Row, Select, Space, Switch, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, ApiError, flatFields, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { useProjects } from "../../projects";
import { Forbidden } from "../../components/common";
import { bytes, type Deployment, type DeploymentCreate, type FitEstimate } from "./types";

export type DeployValues = {
  project?: string;
  name?: string;
  model_id?: string;
  model?: string;
  replicas: number;
  replicas_min?: number | null;
  replicas_max?: number | null;
  cpus: number;
  memory: string;
  gpus: number;
  gpu_type?: string;
  accelerator: string;
  slots: number;
  context: number;
  kv_cache_type: "f16" | "q8_0";
  autoscale_target?: number | null;
  scale_to_zero: boolean;
  scale_to_zero_after_s?: number | null;
  tokens_per_minute?: number | null;
  max_request_bytes?: number | null;
  max_tokens?: number | null;
};

export const DEPLOY_DEFAULTS: DeployValues = {
  replicas: 1,
  cpus: 1,
  memory: "1G",
  gpus: 0,
  accelerator: "gpu",
  slots: 4,
  context: 2048,
  kv_cache_type: "f16",
  scale_to_zero: false,
  scale_to_zero_after_s: 600,
};

/** The API's body for the form's values: empty optional fields left out. */
export function toBody(v: DeployValues): DeploymentCreate {
  const body: Record<string, unknown> = {
    project: v.project,
    name: v.name,
    model: v.model,
    replicas: v.replicas,
    cpus: v.cpus,
    memory: v.memory,
    gpus: v.gpus,
    accelerator: v.accelerator,
    slots: v.slots,
    context: v.context,
    kv_cache_type: v.kv_cache_type,
  };
  for (const key of [
    "replicas_min",
    "replicas_max",
    "gpu_type",
    "autoscale_target",
    "tokens_per_minute",
    "max_request_bytes",
    "max_tokens",
  ] as const) {
    const value = v[key];
    if (value !== undefined && value !== null && value !== "") body[key] = value;
  }
  if (v.scale_to_zero) body.scale_to_zero_after_s = v.scale_to_zero_after_s ?? 600;
  return body as DeploymentCreate;
}

const FIELDS = new Set([
  "project", "name", "model", "replicas", "replicas_min", "replicas_max", "cpus", "memory", "gpus", "gpu_type",
  "accelerator", "slots", "context", "kv_cache_type", "autoscale_target", "scale_to_zero_after_s", "tokens_per_minute",
  "max_request_bytes", "max_tokens",
]);

function FitCard({ fit, error, pending }: { fit: FitEstimate | null; error: string | null; pending: boolean }) {
  const { t } = useI18n();
  let body;
  if (error) body = <Alert type="error" showIcon message={t("dep.fitNo")} description={error} data-testid="fit-result" data-fits="false" />;
  else if (!fit) body = <Typography.Text type="secondary">{t("dep.fitHint")}</Typography.Text>;
  else
    body = (
      <Space direction="vertical" style={{ width: "100%" }}>
        <Alert
          type={fit.fits === false ? "error" : fit.fits ? "success" : "warning"}
          showIcon
          message={fit.fits === false ? t("dep.fitNo") : fit.fits ? t("dep.fitYes") : t("dep.fitUnknown")}
          description={fit.reason}
          data-testid="fit-result"
          data-fits={String(fit.fits)}
        />
        <Descriptions column={1} size="small">
          {fit.tensor_parallel != null && (
            <Descriptions.Item label={t("dep.tensorParallel")}>{fit.tensor_parallel}</Descriptions.Item>
          )}
          {fit.per_device_bytes != null && (
            <Descriptions.Item label={t("dep.perDevice")}>{bytes(fit.per_device_bytes)}</Descriptions.Item>
          )}
          {Object.entries(fit.breakdown ?? {}).map(([part, n]) => (
            <Descriptions.Item key={part} label={part}>
              {bytes(n)}
            </Descriptions.Item>
          ))}
        </Descriptions>
      </Space>
    );
  return (
    <Card size="small" title={t("dep.fit")} extra={pending ? t("common.loading") : null} data-testid="fit-card">
      {body}
    </Card>
  );
}

export default function DeployPage() {
  const { t } = useI18n();
  const { can, project, tenant } = useSession();
  const projects = useProjects();
  const nav = useNavigate();
  const qc = useQueryClient();
  const [form] = Form.useForm<DeployValues>();
  const [values, setValues] = useState<DeployValues>(DEPLOY_DEFAULTS);
  const [fit, setFit] = useState<FitEstimate | null>(null);
  const [fitError, setFitError] = useState<string | null>(null);
  const [fitPending, setFitPending] = useState(false);
  const [apiError, setApiError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const asked = useRef(0);

  useEffect(() => {
    if (project) {
      form.setFieldValue("project", project);
      setValues((v) => ({ ...v, project }));
    }
  }, [project, form]);

  const models = useQuery({
    queryKey: ["models", "for-deploy", values.project],
    enabled: !!values.project,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/", { params: { query: { project: values.project, page_size: 200 } } })).results,
  });
  const chosen = (models.data ?? []).find((m) => m.id === values.model_id);
  const versions = useQuery({
    queryKey: ["model-versions", values.model_id],
    enabled: !!values.model_id,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/models/{id}/versions/", {
          params: { path: { id: values.model_id! }, query: { page_size: 200 } },
        }),
      ).results,
  });
  const refs = chosen
    ? [
        ...Object.entries(chosen.aliases).map(([a, n]) => ({ value: `${chosen.name}@${a}`, label: `@${a} → v${n}` })),
        ...(versions.data ?? [])
          .filter((v) => v.state === "ready")
          .map((v) => ({ value: `${chosen.name}:${v.number}`, label: `v${v.number} (${v.framework || "?"})` })),
      ]
    : [];

  // the fit estimate: a dry run of the deploy, 600 ms after the last change
  useEffect(() => {
    if (!values.project || !values.model) return;
    const n = ++asked.current;
    setFitPending(true);
    const timer = setTimeout(async () => {
      const body = { ...toBody(values), name: values.name || "fit-check", dry_run: true };
      const res = await api.POST("/api/v1/deployments/", { body });
      if (n !== asked.current) return;
      setFitPending(false);
      if (res.response.ok) {
        setFit((res.data as Schemas["DryRun"]).fit);
        setFitError(null);
        return;
      }
      const err = (res.error ?? {}) as { error?: { message?: string; fields?: Record<string, unknown> } };
      const fields = flatFields(err.error?.fields ?? {});
      // a refusal of the resources asked for is the estimate's answer; other fields wait for the deploy
      const at = (["memory", "gpus", "model"] as const).find((f) => fields[f]);
      setFit(null);
      setFitError(at ? fields[at] : null);
      if (at) form.setFields([{ name: at, errors: [fields[at]] }]);
    }, 600);
    return () => clearTimeout(timer);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [JSON.stringify(toBody(values))]);

  if (!tenant || !can("deployment", "create")) return <Forbidden text={t("dep.viewerNo")} />;

  const submit = async (v: DeployValues) => {
    setBusy(true);
    setApiError(null);
    try {
      // 201 (a deployment) and 200 (a dry run's answer) share the operation
      const d = unwrap(await api.POST("/api/v1/deployments/", { body: toBody(v) })) as Deployment;
      qc.invalidateQueries({ queryKey: ["deployments"] });
      nav(`/deployments/${d.id}`);
    } catch (e) {
      if (e instanceof ApiError) {
        const fields = flatFields(e.fields);
        const unplaced: string[] = [];
        for (const [key, msg] of Object.entries(fields)) {
          const name = key === "scale_to_zero_after_s" ? "scale_to_zero_after_s" : key;
          if (FIELDS.has(name)) form.setFields([{ name: name as keyof DeployValues, errors: [msg] }]);
          else unplaced.push(`${key}: ${msg}`);
        }
        setApiError([Object.keys(fields).length ? t("submit.fixErrors") : e.message, ...unplaced].join("\n"));
      } else setApiError(String(e));
    } finally {
      setBusy(false);
    }
  };

  const num = (name: keyof DeployValues, label: string, min: number, max: number, extra?: string) => (
    <Form.Item label={label} name={name} extra={extra}>
      <InputNumber min={min} max={max} style={{ width: "100%" }} data-testid={`deploy-${name}`} />
    </Form.Item>
  );
  const required = (label: string) => [
    { validator: (_: unknown, v: unknown) => (v ? Promise.resolve() : Promise.reject(new Error(label))) },
  ];

  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>
        {t("dep.deployTitle")}
      </Typography.Title>
      <Row gutter={16}>
        <Col xs={24} xl={16}>
          <Form<DeployValues>
            form={form}
            layout="vertical"
            initialValues={DEPLOY_DEFAULTS}
            onValuesChange={(changed, all) => {
              if ("project" in changed) form.setFieldsValue({ model_id: undefined, model: undefined });
              if ("model_id" in changed) form.setFieldsValue({ model: undefined });
              setValues({ ...all, ...form.getFieldsValue(true) });
            }}
            onFinish={submit}
            data-testid="deploy-form"
          >
            <Row gutter={16}>
              <Col xs={24} md={8}>
                <Form.Item label={t("common.project")} name="project" rules={required(t("common.project"))}>
                  <Select
                    aria-label={t("common.project")}
                    data-testid="deploy-project"
                    options={(projects.data ?? []).map((p) => ({ value: p.id, label: p.slug }))}
                  />
                </Form.Item>
              </Col>
              <Col xs={24} md={8}>
                <Form.Item label={t("common.name")} name="name" rules={[{ required: true }]} extra={t("dep.nameHelp")}>
                  <Input data-testid="deploy-name" />
                </Form.Item>
              </Col>
              <Col xs={24} md={8}>
                <Form.Item label={t("dep.registeredModel")} name="model_id" rules={required(t("dep.registeredModel"))}>
                  <Select
                    aria-label={t("dep.registeredModel")}
                    data-testid="deploy-model"
                    loading={models.isLoading}
                    notFoundContent={t("catalog.emptyModels")}
                    options={(models.data ?? []).map((m) => ({ value: m.id, label: m.name }))}
                  />
                </Form.Item>
              </Col>
            </Row>
            <Form.Item label={t("dep.versionOrAlias")} name="model" rules={required(t("dep.versionOrAlias"))} extra={t("dep.versionHelp")}>
              <Select aria-label={t("dep.versionOrAlias")} data-testid="deploy-ref" options={refs} />
            </Form.Item>
            <Card size="small" title={t("dep.replicas")} style={{ marginBottom: 16 }}>
              <Row gutter={16}>
                <Col xs={8}>{num("replicas", t("dep.desired"), 0, 64)}</Col>
                <Col xs={8}>{num("replicas_min", t("dep.min"), 0, 64)}</Col>
                <Col xs={8}>{num("replicas_max", t("dep.max"), 1, 64)}</Col>
                <Col xs={12}>
                  <Form.Item label={t("dep.autoscaleTarget")} name="autoscale_target" extra={t("dep.autoscaleHelp")}>
                    <InputNumber min={0.1} max={100} step={0.1} style={{ width: "100%" }} />
                  </Form.Item>
                </Col>
                <Col xs={12}>
                  <Space align="start">
                    <Form.Item label={t("dep.scaleToZero")} name="scale_to_zero" valuePropName="checked">
                      <Switch data-testid="deploy-scale-to-zero" />
                    </Form.Item>
                    {values.scale_to_zero && num("scale_to_zero_after_s", t("dep.idleSeconds"), 10, 30 * 86400)}
                  </Space>
                </Col>
              </Row>
            </Card>
            <Card size="small" title={t("dep.perReplica")} style={{ marginBottom: 16 }}>
              <Row gutter={16}>
                <Col xs={12} md={6}>{num("cpus", "CPU", 1, 256)}</Col>
                <Col xs={12} md={6}>
                  <Form.Item label={t("dep.memory")} name="memory">
                    <Input placeholder="4G" data-testid="deploy-memory" />
                  </Form.Item>
                </Col>
                <Col xs={12} md={6}>{num("gpus", "GPU", 0, 16)}</Col>
                <Col xs={12} md={6}>
                  <Form.Item label={t("submit.gpuType")} name="gpu_type">
                    <Input data-testid="deploy-gpu_type" />
                  </Form.Item>
                </Col>
                <Col xs={12} md={6}>{num("slots", t("dep.slotsLabel"), 1, 256)}</Col>
                <Col xs={12} md={6}>{num("context", t("dep.contextLabel"), 16, 1024 * 1024)}</Col>
                <Col xs={12} md={6}>
                  <Form.Item label={t("dep.kvType")} name="kv_cache_type">
                    <Select
                      aria-label={t("dep.kvType")}
                      options={[
                        { value: "f16", label: "f16" },
                        { value: "q8_0", label: "q8_0 (8-bit)" },
                      ]}
                    />
                  </Form.Item>
                </Col>
              </Row>
            </Card>
            <Card size="small" title={t("dep.limits")} style={{ marginBottom: 16 }}>
              <Row gutter={16}>
                <Col xs={12} md={8}>{num("tokens_per_minute", t("dep.tokensPerMinute"), 1, 1e9)}</Col>
                <Col xs={12} md={8}>{num("max_request_bytes", t("dep.maxRequestBytes"), 1024, 64 * 1024 * 1024)}</Col>
                <Col xs={12} md={8}>{num("max_tokens", "max_tokens", 1, 1024 * 1024)}</Col>
              </Row>
            </Card>
            {apiError && (
              <Alert type="error" showIcon role="alert" message={apiError} style={{ marginBottom: 12, whiteSpace: "pre-wrap" }} data-testid="deploy-error" />
            )}
            <Button type="primary" htmlType="submit" loading={busy} data-testid="deploy-submit">
              {t("dep.deploy")}
            </Button>
          </Form>
        </Col>
        <Col xs={24} xl={8}>
          <FitCard fit={fit} error={fitError} pending={fitPending} />
        </Col>
      </Row>
    </div>
  );
}
