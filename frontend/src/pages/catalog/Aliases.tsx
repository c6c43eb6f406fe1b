// A model's aliases: moved to a version, removed (confirmed), and the history of their moves.
import { useState } from "react";
import { Button, Input, Popconfirm, Space, Table, Tag } from "antd";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../../api/client";
import { useI18n } from "../../i18n";
import { ErrorState, fmtTime } from "../../components/common";

export function AliasMove({ id, n }: { id: string; n: number }) {
  const { t } = useI18n();
  const qc = useQueryClient();
  const [alias, setAlias] = useState("");
  const m = useMutation({
    mutationFn: async () =>
      unwrap(
        await api.PUT("/api/v1/models/{id}/aliases/{alias}/", { params: { path: { id, alias } }, body: { version: n } }),
      ),
    onSuccess: () => {
      setAlias("");
      qc.invalidateQueries({ queryKey: ["model-versions", id] });
      qc.invalidateQueries({ queryKey: ["models"] });
    },
  });
  return (
    <Space>
      <Input
        size="small"
        value={alias}
        onChange={(e) => setAlias(e.target.value)}
        placeholder="production"
        aria-label={t("alias.name")}
        data-testid={`alias-${n}`}
        style={{ width: 120 }}
      />
      <Button size="small" disabled={!alias || m.isPending} onClick={() => m.mutate()} data-testid={`alias-move-${n}`}>
        {t("alias.move")}
      </Button>
      {m.error && <ErrorState error={m.error} />}
    </Space>
  );
}

/** An alias with a button that removes it (DELETE .../aliases/{alias}/, audited), confirmed. */
export function AliasTag({ id, alias }: { id: string; alias: string }) {
  const { t } = useI18n();
  const qc = useQueryClient();
  const m = useMutation({
    mutationFn: async () =>
      unwrap(await api.DELETE("/api/v1/models/{id}/aliases/{alias}/", { params: { path: { id, alias } } })),
    onSuccess: () => {
      qc.invalidateQueries({ queryKey: ["model-versions", id] });
      qc.invalidateQueries({ queryKey: ["models"] });
    },
  });
  return (
    <Tag>
      {alias}
      <Popconfirm title={t("alias.remove")} onConfirm={() => m.mutate()}>
        <Button type="link" size="small" aria-label={`${t("alias.remove")}: ${alias}`} data-testid={`alias-remove-${alias}`}>
          ×
        </Button>
      </Popconfirm>
      {m.error && <ErrorState error={m.error} />}
    </Tag>
  );
}

/** Every move of the model's aliases, newest first (from the audit log). */
export function AliasHistory({ id }: { id: string }) {
  const { t } = useI18n();
  const q = useQuery({
    queryKey: ["model-versions", id, "alias-history"],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/models/{id}/alias-history/", { params: { path: { id } } })),
  });
  if (q.error) return <ErrorState error={q.error} />;
  if (!q.data?.length) return null;
  const v = (n: number | null | undefined) => (n == null ? "—" : `v${n}`);
  return (
    <Table
      rowKey={(m) => `${m.at}-${m.alias}`}
      size="small"
      pagination={false}
      title={() => t("alias.history")}
      dataSource={[...q.data].reverse()}
      columns={[
        { title: t("alias.name"), dataIndex: "alias" },
        { title: t("alias.moved"), key: "move", render: (_, m) => `${v(m.from_version)} → ${v(m.to_version)}` },
        { title: t("alias.by"), dataIndex: "actor" },
        { title: t("alias.at"), dataIndex: "at", render: fmtTime },
      ]}
    />
  );
}
