// The jobs list (/jobs): filters, sorting and cursor pages in the URL, live states over the tenant's socket.
import { useCallback, useEffect, useState } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { Badge, Button, Input, Select, Space, Table, Tag, Tooltip, Typography } from "antd";
import type { SorterResult } from "antd/es/table/interface";
import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { api, cursorOf, unwrap, type Job } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { ALL_STATES, EmptyState, ErrorState, StateTag, fmtTime } from "../components/common";
import { useLiveJobs, type JobStateChange } from "../components/useJobSocket";
import { startsIn } from "../startEstimate";

export default function JobsPage() {
  const { t } = useI18n();
  const { tenant, project } = useSession();
  const [params, setParams] = useSearchParams();
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [live, setLive] = useState<Record<string, string>>({});
  const name = params.get("name") ?? "";
  const state = params.get("state") ?? "";
  const user = params.get("user") ?? "";
  const signature = params.get("signature") ?? "";
  const ordering = params.get("ordering") ?? "-created_at";
  const pageSize = Number(params.get("page_size") ?? 25);
  const cursor = cursors[cursors.length - 1];

  const setFilter = (key: string, value: string) => {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value);
    else next.delete(key);
    setParams(next, { replace: true });
    setCursors([undefined]);
  };

  const query = {
    tenant: tenant?.id,
    project: project ?? undefined,
    name: name || undefined,
    state: state || undefined,
    user: user || undefined,
    signature: signature || undefined,
    ordering,
    page_size: pageSize,
    cursor,
  };
  const jobs = useQuery({
    queryKey: ["jobs", "list", query],
    enabled: !!tenant,
    placeholderData: keepPreviousData,
    queryFn: async () => unwrap(await api.GET("/api/v1/jobs/", { params: { query } })),
  });
  const signatures = useQuery({
    queryKey: ["signatures", tenant?.id],
    enabled: !!tenant,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/failure-signatures/", { params: { query: { page_size: 200 } } })).results,
  });
  useEffect(() => setLive({}), [jobs.data]);

  // One socket for the whole list: a change shows in its row at once, and the page (filters,
  // order, new jobs) is fetched again once per burst.
  const patch = useCallback(
    (changes: JobStateChange[]) =>
      setLive((prev) => ({ ...prev, ...Object.fromEntries(changes.map((c) => [c.job, c.state])) })),
    [],
  );
  useLiveJobs(tenant?.id, project, ["jobs"], patch);
  const rows = jobs.data?.results ?? [];

  const sortOrder = (field: string) =>
    ordering === field ? ("ascend" as const) : ordering === `-${field}` ? ("descend" as const) : null;
  const columns = [
    {
      title: t("common.name"),
      dataIndex: "name",
      sorter: true,
      sortOrder: sortOrder("name"),
      render: (_: unknown, j: Job) => <Link to={`/jobs/${j.id}`}>{j.name}</Link>,
    },
    { title: t("common.project"), dataIndex: "project_slug" },
    { title: t("common.user"), dataIndex: "user" },
    {
      title: t("common.state"),
      dataIndex: "state",
      sorter: true,
      sortOrder: sortOrder("state"),
      render: (_: unknown, j: Job) => {
        const s = live[j.id] ?? j.state;
        const why = [j.state_reason, j.queue_position != null ? `${t("jobs.position")} #${j.queue_position}` : ""]
          .filter(Boolean)
          .join(" · ");
        return (
          <Tooltip title={why || undefined}>
            <span>
              <StateTag state={s} />
              {j.queue_position != null && <Typography.Text type="secondary">#{j.queue_position}</Typography.Text>}
            </span>
          </Tooltip>
        );
      },
    },
    {
      title: t("jobs.starts"),
      dataIndex: "expected_start",
      render: (_: unknown, j: Job) => {
        const words = (live[j.id] ?? j.state) === j.state ? startsIn(j.expected_start, Date.now(), t) : null;
        return words ? (
          <Typography.Text type="secondary" data-testid="job-starts">
            {words}
          </Typography.Text>
        ) : null;
      },
    },
    {
      title: t("jobs.signatures"),
      dataIndex: "signatures",
      render: (names: string[] | undefined) =>
        (names ?? []).map((n) => (
          <Tag
            key={n}
            color="red"
            data-testid="job-signature"
            style={{ cursor: "pointer" }}
            role="button"
            tabIndex={0}
            title={t("jobs.filterBySignature")}
            onClick={() => setFilter("signature", n)}
            onKeyDown={(e) => (e.key === "Enter" || e.key === " ") && setFilter("signature", n)}
          >
            {n}
          </Tag>
        )),
    },
    { title: t("jobs.cluster"), dataIndex: "cluster", render: (v: string | null) => v ?? "—" },
    { title: t("jobs.gpus"), dataIndex: "gpus" },
    { title: t("submit.priority"), dataIndex: "priority", sorter: true, sortOrder: sortOrder("priority") },
    {
      title: t("common.created"),
      dataIndex: "created_at",
      sorter: true,
      sortOrder: sortOrder("created_at"),
      render: (v: string) => fmtTime(v),
    },
  ];

  return (
    <div>
      <Typography.Title level={1} style={{ fontSize: 24 }}>
        {t("jobs.title")}{" "}
        <Badge status="processing" text={<span style={{ fontSize: 12 }}>{t("jobs.live")}</span>} />
      </Typography.Title>
      <Space wrap style={{ marginBottom: 12 }}>
        <Input.Search
          aria-label={t("jobs.filterName")}
          placeholder={t("jobs.filterName")}
          defaultValue={name}
          allowClear
          onSearch={(v) => setFilter("name", v)}
          style={{ width: 200 }}
        />
        <Select
          aria-label={t("jobs.filterState")}
          mode="multiple"
          allowClear
          placeholder={t("jobs.filterState")}
          value={state ? state.split(",") : []}
          onChange={(v: string[]) => setFilter("state", v.join(","))}
          options={ALL_STATES.map((s) => ({ value: s, label: s }))}
          style={{ minWidth: 220 }}
        />
        <Input.Search
          aria-label={t("jobs.filterUser")}
          placeholder={t("jobs.filterUser")}
          defaultValue={user}
          allowClear
          onSearch={(v) => setFilter("user", v)}
          style={{ width: 160 }}
        />
        <Select
          aria-label={t("jobs.filterSignature")}
          allowClear
          placeholder={t("jobs.filterSignature")}
          value={signature || undefined}
          onChange={(v?: string) => setFilter("signature", v ?? "")}
          options={(signatures.data ?? []).map((s) => ({ value: s.name, label: s.name }))}
          style={{ minWidth: 180 }}
        />
      </Space>
      {jobs.error ? (
        <ErrorState error={jobs.error} onRetry={() => jobs.refetch()} />
      ) : (
        <Table<Job>
          rowKey="id"
          size="small"
          loading={jobs.isFetching && !jobs.data}
          dataSource={rows}
          columns={columns}
          pagination={false}
          locale={{ emptyText: <EmptyState>{t("jobs.empty")}</EmptyState> }}
          onChange={(_p, _f, sorter) => {
            const s = sorter as SorterResult<Job>;
            const field = String(s.field ?? "");
            setFilter("ordering", s.order && field ? (s.order === "descend" ? `-${field}` : field) : "");
          }}
        />
      )}
      <Space style={{ marginTop: 12 }}>
        <Button disabled={cursors.length < 2} onClick={() => setCursors([undefined])}>
          {t("common.first")}
        </Button>
        <Button disabled={cursors.length < 2} onClick={() => setCursors((c) => c.slice(0, -1))}>
          {t("common.prev")}
        </Button>
        <Button
          data-testid="jobs-next"
          disabled={!jobs.data?.next}
          onClick={() => setCursors((c) => [...c, cursorOf(jobs.data?.next)])}
        >
          {t("common.next")}
        </Button>
        <Select
          aria-label="page size"
          value={pageSize}
          onChange={(v) => setFilter("page_size", String(v))}
          options={[25, 50, 100, 200].map((n) => ({ value: n, label: `${n} / page` }))}
        />
      </Space>
    </div>
  );
}
