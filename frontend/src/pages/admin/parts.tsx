// What the console's sections share: the page frame, a create button and modal whose API field
// errors land at the field, a secret shown once, the list table with its empty and error states,
// a confirmed destructive action, a tenant's rows of a list the API spans over tenants, the roles.
import { useState, type ReactNode } from "react";
import { App, Alert, Button, Form, Modal, Popconfirm, Space, Table, Typography } from "antd";
import type { TableProps } from "antd";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { ApiError, flatFields, type Schemas } from "../../api/client";
import { useI18n, type Key } from "../../i18n";
import { useSession } from "../../session";
import { EmptyState, ErrorState } from "../../components/common";

/** The tenant roles, lowest first (members' and invitations' role pickers). */
export const ROLES: Schemas["TenantRoleEnum"][] = ["viewer", "member", "admin", "owner"];

export function Section({ title, extra, children }: { title: Key; extra?: ReactNode; children: ReactNode }) {
  const { t } = useI18n();
  return (
    <div>
      <Space style={{ width: "100%", justifyContent: "space-between" }}>
        <Typography.Title level={1} style={{ fontSize: 24 }}>{t(title)}</Typography.Title>
        {extra}
      </Space>
      {children}
    </div>
  );
}

/** A write that refreshes `keys` when it succeeds and says why when it fails. */
export function useMutate<T>(fn: (v: T) => Promise<unknown>, keys: string[]) {
  const qc = useQueryClient();
  const { message } = App.useApp();
  return useMutation({
    mutationFn: fn,
    onSuccess: () => keys.forEach((k) => qc.invalidateQueries({ queryKey: [k] })),
    onError: (e) => message.error(e instanceof ApiError ? e.message : String(e)),
  });
}

/** The rows of the chosen tenant from a list the API gives over all the caller's tenants. */
export function useTenantList<T extends { tenant_id: string }>(
  key: string,
  fetch: () => Promise<T[]>,
  enabled = true,
) {
  const { tenant } = useSession();
  return useQuery({
    queryKey: [key, tenant?.id],
    enabled,
    queryFn: async () => (await fetch()).filter((x) => x.tenant_id === tenant!.id),
  });
}

/** The section's primary action, shown only when `allowed`. */
export function CreateButton({
  allowed,
  onClick,
  label = "common.create",
  testId,
}: {
  allowed: boolean;
  onClick: () => void;
  label?: Key;
  testId?: string;
}) {
  const { t } = useI18n();
  if (!allowed) return null;
  return (
    <Button type="primary" onClick={onClick} data-testid={testId}>
      {t(label)}
    </Button>
  );
}

/** A token, link or secret the API shows once: copy it now. */
export function ShownOnce({
  value,
  onClose,
  message,
  code = true,
  testId,
}: {
  value: string | null;
  onClose: () => void;
  message: Key;
  code?: boolean;
  testId?: string;
}) {
  const { t } = useI18n();
  if (!value) return null;
  return (
    <Alert
      type="success"
      closable
      onClose={onClose}
      message={t(message)}
      description={
        <Typography.Text copyable code={code} data-testid={testId}>
          {value}
        </Typography.Text>
      }
      style={{ marginBottom: 12 }}
    />
  );
}

/** A small destructive button that asks first. */
export function ConfirmButton({ label, onConfirm }: { label: Key; onConfirm: () => void }) {
  const { t } = useI18n();
  return (
    <Popconfirm title={t(label)} onConfirm={onConfirm}>
      <Button size="small" danger>
        {t(label)}
      </Button>
    </Popconfirm>
  );
}

/** A section's list: its rows, or an error with a retry, and an empty state. */
export function ListTable<T extends object>({
  query,
  rows,
  empty,
  ...props
}: {
  query: { isLoading: boolean; error: unknown; refetch: () => unknown; data?: unknown };
  rows?: T[];
  empty?: ReactNode;
} & Omit<TableProps<T>, "dataSource" | "loading">) {
  if (query.error) return <ErrorState error={query.error} onRetry={() => query.refetch()} />;
  return (
    <Table<T>
      rowKey="id"
      size="small"
      loading={query.isLoading}
      dataSource={rows ?? (query.data as T[] | undefined)}
      locale={{ emptyText: <EmptyState>{empty}</EmptyState> }}
      {...props}
    />
  );
}

/** A form in a modal whose API field errors land at the field. */
export function CreateModal<T extends object>({
  title,
  open,
  onClose,
  onSubmit,
  children,
  initial,
}: {
  title: string;
  open: boolean;
  onClose: () => void;
  onSubmit: (v: T) => Promise<unknown>;
  children: ReactNode;
  initial?: Partial<T>;
}) {
  const [form] = Form.useForm<T>();
  const [error, setError] = useState<string | null>(null);
  const { t } = useI18n();
  return (
    <Modal
      title={title}
      open={open}
      onCancel={onClose}
      okText={t("common.save")}
      cancelText={t("common.cancel")}
      onOk={() => form.submit()}
      destroyOnClose
    >
      <Form<T>
        form={form}
        layout="vertical"
        preserve={false}
        initialValues={initial}
        onFinish={async (v) => {
          setError(null);
          try {
            await onSubmit(v);
            form.resetFields(); // nothing typed (a secret's value) outlives the dialog
            onClose();
          } catch (e) {
            if (e instanceof ApiError) {
              const fields = flatFields(e.fields);
              form.setFields(Object.entries(fields).map(([name, msg]) => ({ name: name as never, errors: [msg] })));
              setError(e.message);
            } else setError(String(e));
          }
        }}
      >
        {children}
        {error && <Alert type="error" role="alert" message={error} />}
      </Form>
    </Modal>
  );
}
