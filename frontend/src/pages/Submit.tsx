// The submit form (/jobs/new): every field of the job spec, its YAML view, copy as CLI or curl.
import { useEffect, useMemo, useState } from "react";
import { useNavigate, useSearchParams } from "react-router-dom";
import { App, Alert, AutoComplete, Button, Card, Col, Collapse, Form, Input, InputNumber, Row, Select, Space, Tabs, Typography } from "antd";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, ApiError, flatFields, unwrap, type Schemas } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { useProjects } from "../projects";
import { Forbidden } from "../components/common";
import { asCli, asCurl, fromSpec, fromYaml, toSpec, toYaml, type FormValues } from "../spec";
import { useSecrets } from "./admin/Secrets";

// Checked against the generated enums.
const LAUNCHERS: Schemas["LauncherEnum"][] = ["none", "torchrun", "deepspeed", "mpirun"];
const RETRY_ON: Schemas["RetryOnEnum"][] = ["node_failure", "preemption"];
const ENV_TYPES: Schemas["TypeEnum"][] = ["none", "venv", "conda", "container"];

const DEFAULTS: Partial<FormValues> = {
  kind: "training",
  nodes: 1,
  tasks_per_node: 1,
  gpus_per_node: 0,
  cpus_per_task: 1,
  memory: "1G",
  time_limit: "00:10:00",
  env_type: "none",
  launcher: "none",
  priority: 0,
};

// Form field names for the API's dotted error keys (resources.gpus_per_node -> gpus_per_node).
const FIELD_OF: Record<string, keyof FormValues> = {
  "environment.type": "env_type",
  "environment.path": "env_path",
  "environment.image": "env_image",
  "distributed.launcher": "launcher",
  "restart_policy.max_restarts": "max_restarts",
  "restart_policy.retry_on": "retry_on",
};
const fieldFor = (key: string): keyof FormValues | null => {
  if (FIELD_OF[key]) return FIELD_OF[key];
  const last = key.replace(/^resources\./, "");
  return (
    [
      "name", "project", "kind", "cluster", "command", "working_dir", "env", "secrets", "labels", "priority", "nodes", "tasks_per_node",
      "gpus_per_node", "gpu_type", "cpus_per_task", "memory", "time_limit", "partition",
    ] as const
  ).find((f) => f === last || key.startsWith(`${f}.`)) ?? null;
};

export default function SubmitPage() {
  const { t } = useI18n();
  const { message } = App.useApp();
  const { can, project, tenant } = useSession();
  const projects = useProjects();
  const nav = useNavigate();
  const qc = useQueryClient();
  const [params] = useSearchParams();
  const from = params.get("from");
  const [form] = Form.useForm<FormValues>();
  const [tab, setTab] = useState("form");
  const [yamlText, setYamlText] = useState("");
  const [yamlError, setYamlError] = useState<string | null>(null);
  const [apiError, setApiError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [values, setValues] = useState<FormValues>({ ...DEFAULTS } as FormValues);

  // the clusters a job may name (GET /api/v1/clusters/); the choice only shows with more than one
  const clusters = useQuery({
    queryKey: ["clusters"],
    queryFn: async () => unwrap(await api.GET("/api/v1/clusters/", { params: { query: { page_size: 100 } } })).results,
  });
  const chosen = (clusters.data ?? []).find((c) => c.name === values.cluster) ?? clusters.data?.find((c) => c.is_default);
  const earlier = useQuery({
    queryKey: ["job", from],
    enabled: !!from,
    queryFn: async () => unwrap(await api.GET("/api/v1/jobs/{id}/", { params: { path: { id: from! } } })),
  });
  useEffect(() => {
    if (earlier.data?.spec) {
      const v = { ...DEFAULTS, ...fromSpec(earlier.data.spec as never), project: earlier.data.project };
      form.setFieldsValue(v);
      setValues(v as FormValues);
    }
  }, [earlier.data, form]);
  useEffect(() => {
    if (!from && project) form.setFieldValue("project", project);
  }, [project, from, form]);

  const spec = useMemo(() => toSpec({ ...values, command: values.command ?? "" }), [values]);
  // the names of the chosen project's secrets, offered in the Secrets field (never a value)
  const secretNames = useSecrets(values.project, can("secret", "read"));

  if (!tenant || !can("job", "create")) return <Forbidden text={t("submit.viewerNo")} />;

  const copy = async (text: string) => {
    await navigator.clipboard?.writeText(text).catch(() => undefined);
    message.success(t("common.copied"));
  };

  const submit = async () => {
    let body;
    if (tab === "yaml") {
      try {
        body = fromYaml(yamlText);
      } catch (e) {
        setYamlError(String(e));
        return;
      }
    } else {
      body = toSpec(form.getFieldsValue(true));
    }
    setBusy(true);
    setApiError(null);
    form.setFields(Object.keys(form.getFieldsValue(true)).map((name) => ({ name: name as keyof FormValues, errors: [] })));
    try {
      const job = unwrap(await api.POST("/api/v1/jobs/", { body }));
      qc.invalidateQueries({ queryKey: ["jobs"] });
      nav(`/jobs/${job.id}`);
    } catch (e) {
      if (e instanceof ApiError) {
        const fields = flatFields(e.fields);
        const unplaced: string[] = [];
        for (const [key, msg] of Object.entries(fields)) {
          const f = fieldFor(key);
          if (f && tab === "form") form.setFields([{ name: f, errors: [msg] }]);
          else unplaced.push(`${key}: ${msg}`);
        }
        setApiError([Object.keys(fields).length ? t("submit.fixErrors") : e.message, ...unplaced].join("\n"));
      } else setApiError(String(e));
    } finally {
      setBusy(false);
    }
  };

  const formView = (
    <Form<FormValues>
      form={form}
      layout="vertical"
      initialValues={DEFAULTS}
      onValuesChange={(_c, all) => setValues(all)}
      onFinish={submit}
      data-testid="submit-form"
    >
      <Row gutter={16}>
        <Col xs={24} md={12}>
          <Form.Item label={t("common.name")} name="name" rules={[{ required: true }]}>
            <Input data-testid="field-name" />
          </Form.Item>
        </Col>
        <Col xs={24} md={12}>
          {/* a validator, not `required`: antd would put aria-required on the select's div */}
          <Form.Item
            label={t("common.project")}
            name="project"
            rules={[{ validator: (_, v) => (v ? Promise.resolve() : Promise.reject(new Error(t("common.project")))) }]}
          >
            <Select
              data-testid="field-project"
              options={(projects.data ?? []).map((p) => ({ value: p.id, label: p.slug }))}
            />
          </Form.Item>
        </Col>
      </Row>
      <Form.Item label={t("submit.command")} name="command" extra={t("submit.commandHelp")} rules={[{ required: true }]}>
        <Input.TextArea rows={3} data-testid="field-command" style={{ fontFamily: "monospace" }} />
      </Form.Item>
      <Row gutter={16}>
        <Col xs={24} md={12}>
          <Form.Item label={t("submit.workingDir")} name="working_dir">
            <Input data-testid="field-working_dir" />
          </Form.Item>
        </Col>
        <Col xs={12} md={6}>
          <Form.Item label={t("submit.kind")} name="kind">
            <Select options={["training", "inference"].map((v) => ({ value: v, label: v }))} />
          </Form.Item>
        </Col>
        <Col xs={12} md={6}>
          <Form.Item label={t("submit.priority")} name="priority">
            <InputNumber min={-1000} max={1000} style={{ width: "100%" }} />
          </Form.Item>
        </Col>
      </Row>
      <Card size="small" title={t("submit.resources")} style={{ marginBottom: 16 }}>
        <Row gutter={16}>
          {(
            [
              ["nodes", "submit.nodes", 1, 64],
              ["tasks_per_node", "submit.tasksPerNode", 1, 128],
              ["gpus_per_node", "submit.gpusPerNode", 0, 16],
              ["cpus_per_task", "submit.cpusPerTask", 1, 256],
            ] as const
          ).map(([name, label, min, max]) => (
            <Col xs={12} md={6} key={name}>
              <Form.Item label={t(label)} name={name}>
                <InputNumber min={min} max={max} style={{ width: "100%" }} data-testid={`field-${name}`} />
              </Form.Item>
            </Col>
          ))}
          <Col xs={12} md={6}>
            <Form.Item label={t("submit.memory")} name="memory">
              <Input placeholder="4G" data-testid="field-memory" />
            </Form.Item>
          </Col>
          <Col xs={12} md={6}>
            <Form.Item label={t("submit.timeLimit")} name="time_limit">
              <Input placeholder="01:00:00" data-testid="field-time_limit" />
            </Form.Item>
          </Col>
          <Col xs={12} md={6}>
            <Form.Item label={t("submit.gpuType")} name="gpu_type">
              <Input />
            </Form.Item>
          </Col>
          {(clusters.data?.length ?? 0) > 1 && (
            <Col xs={12} md={6}>
              <Form.Item label={t("submit.cluster")} name="cluster" extra={t("submit.clusterDefault")}>
                <Select
                  allowClear
                  data-testid="field-cluster"
                  placeholder={clusters.data?.find((c) => c.is_default)?.name}
                  options={(clusters.data ?? []).map((c) => ({
                    value: c.name,
                    label: `${c.name} (${c.backend}${c.healthy ? "" : `, ${t("submit.unhealthy")}`})`,
                  }))}
                />
              </Form.Item>
            </Col>
          )}
          <Col xs={12} md={6}>
            <Form.Item label={t("submit.partition")} name="partition">
              <AutoComplete
                allowClear
                data-testid="field-partition"
                placeholder={chosen?.partitions.find((p) => p.is_default)?.name}
                options={(chosen?.partitions ?? []).map((p) => ({ value: p.name }))}
              />
            </Form.Item>
          </Col>
        </Row>
      </Card>
      <Collapse
        style={{ marginBottom: 16 }}
        items={[
          {
            key: "more",
            label: `${t("submit.environment")} · ${t("submit.env")} · ${t("submit.restart")}`,
            forceRender: true,
            children: (
              <Row gutter={16}>
                <Col xs={12} md={6}>
                  <Form.Item label={t("submit.envType")} name="env_type">
                    <Select options={ENV_TYPES.map((v) => ({ value: v, label: v }))} />
                  </Form.Item>
                </Col>
                <Col xs={12} md={9}>
                  <Form.Item label={t("submit.envPath")} name="env_path">
                    <Input />
                  </Form.Item>
                </Col>
                <Col xs={24} md={9}>
                  <Form.Item label={t("submit.envImage")} name="env_image">
                    <Input />
                  </Form.Item>
                </Col>
                <Col xs={24} md={12}>
                  <Form.Item label={t("submit.env")} name="env" extra={t("submit.envHelp")}>
                    <Input.TextArea rows={3} style={{ fontFamily: "monospace" }} />
                  </Form.Item>
                  <Form.Item name="env_secrets" hidden />
                </Col>
                <Col xs={24} md={12}>
                  <Form.Item label={t("submit.secrets")} name="secrets" extra={t("submit.secretsHelp")}>
                    <Select
                      mode="tags"
                      data-testid="field-secrets"
                      options={(secretNames.data ?? []).map((x) => ({ value: x.name, label: x.name }))}
                    />
                  </Form.Item>
                </Col>
                <Col xs={24} md={12}>
                  <Form.Item label={t("submit.labels")} name="labels">
                    <Input.TextArea rows={3} style={{ fontFamily: "monospace" }} />
                  </Form.Item>
                </Col>
                <Col xs={12} md={8}>
                  <Form.Item label={t("submit.launcher")} name="launcher">
                    <Select options={LAUNCHERS.map((v) => ({ value: v, label: v }))} />
                  </Form.Item>
                </Col>
                <Col xs={12} md={8}>
                  <Form.Item label={t("submit.maxRestarts")} name="max_restarts">
                    <InputNumber min={0} max={20} style={{ width: "100%" }} />
                  </Form.Item>
                </Col>
                <Col xs={24} md={8}>
                  <Form.Item label={t("submit.retryOn")} name="retry_on">
                    <Select
                      mode="multiple"
                      options={RETRY_ON.map((v) => ({ value: v, label: v }))}
                    />
                  </Form.Item>
                </Col>
              </Row>
            ),
          },
        ]}
      />
    </Form>
  );

  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>{earlier.data ? `${t("submit.resubmit")}: ${earlier.data.name}` : t("submit.title")}</Typography.Title>
      <Tabs
        activeKey={tab}
        onChange={(k) => {
          if (k === "yaml") {
            setYamlText(toYaml(toSpec(form.getFieldsValue(true))));
            setYamlError(null);
          } else if (tab === "yaml") {
            try {
              const v = { ...DEFAULTS, ...fromSpec(fromYaml(yamlText) as never) };
              form.setFieldsValue(v);
              setValues(v as FormValues);
            } catch (e) {
              setYamlError(String(e));
              return;
            }
          }
          setTab(k);
        }}
        items={[
          { key: "form", label: t("submit.form"), children: formView },
          {
            key: "yaml",
            label: t("submit.yaml"),
            children: (
              <>
                <Input.TextArea
                  aria-label="YAML"
                  value={yamlText}
                  onChange={(e) => setYamlText(e.target.value)}
                  rows={18}
                  style={{ fontFamily: "monospace" }}
                  data-testid="yaml-view"
                />
                {yamlError && <Alert type="error" message={yamlError} />}
              </>
            ),
          },
        ]}
      />
      {apiError && (
        <Alert type="error" role="alert" showIcon message={<pre style={{ margin: 0, whiteSpace: "pre-wrap" }}>{apiError}</pre>} style={{ marginBottom: 16 }} data-testid="submit-error" />
      )}
      <Space wrap>
        <Button type="primary" onClick={() => (tab === "form" ? form.submit() : submit())} loading={busy} data-testid="submit-button">
          {t("submit.submit")}
        </Button>
        <Button onClick={() => copy(asCli(spec))}>{t("submit.copyCli")}</Button>
        <Button onClick={() => copy(asCurl(spec, window.location.origin))}>{t("submit.copyCurl")}</Button>
      </Space>
    </div>
  );
}
