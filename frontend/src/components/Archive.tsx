// Archive instead of delete (docs/ui.md): a project, dataset, model or deployment is archived
// through a dialog that asks for its name typed (the API checks it too: 400 at `confirm`),
// restored by an admin, and shown in lists only with "Show archived" (?archived=true), with
// an "Archived" badge.
import { useId, useState, type ReactNode } from "react";
import { Alert, App, Button, Input, Modal, Space, Switch, Tag, Typography, type ButtonProps } from "antd";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { ApiError, api, flatFields, unwrap } from "../api/client";
import { useI18n, type Key } from "../i18n";
import { useSession } from "../session";
import { fmtTime } from "./common";

export type ArchiveKind = "project" | "dataset" | "model" | "deployment";

const COLLECTION: Record<ArchiveKind, string> = {
  project: "projects",
  dataset: "datasets",
  model: "models",
  deployment: "deployments",
};

// Archiving a project archives its deployments, a model its deployments: every list refreshes.
const LIST_KEYS = ["projects", "datasets", "models", "deployments", "deployment"];

/** POST /api/v1/{collection}/{id}/archive/ (with the typed name) or .../restore/. */
export async function lifecycleCall(kind: ArchiveKind, id: string, what: "archive" | "restore", confirm?: string) {
  // one typed route stands for the four alike (the generated schema has each)
  const path = `/api/v1/${COLLECTION[kind]}/{id}/${what}/` as "/api/v1/projects/{id}/archive/";
  return unwrap(
    await api.POST(path, { params: { path: { id } }, body: (what === "archive" ? { confirm } : undefined) as never }),
  );
}

function useLifecycle(kind: ArchiveKind, id: string, what: "archive" | "restore") {
  const qc = useQueryClient();
  return useMutation({
    mutationFn: (confirm?: string) => lifecycleCall(kind, id, what, confirm),
    onSuccess: () => LIST_KEYS.forEach((k) => qc.invalidateQueries({ queryKey: [k] })),
  });
}

/** May the signed-in role archive (or restore) this kind? The API's role matrix. */
export function useMayArchive() {
  const { can } = useSession();
  return (kind: ArchiveKind, what: "archive" | "restore" = "archive") => can(kind, what);
}

/** "Archive", then a dialog whose Archive button is enabled only once `name` is typed. */
export function ArchiveButton({
  kind,
  id,
  name,
  size,
  onArchived,
}: {
  kind: ArchiveKind;
  id: string;
  name: string; // what confirms it: a project's slug, the others' name
  size?: "small";
  onArchived?: () => void;
}) {
  const { t } = useI18n();
  const { message } = App.useApp();
  const inputId = useId();
  const [open, setOpen] = useState(false);
  const [typed, setTyped] = useState("");
  const m = useLifecycle(kind, id, "archive");
  const close = () => {
    setOpen(false);
    setTyped("");
    m.reset();
  };
  const error = m.error instanceof ApiError ? m.error : null;
  const confirmError = error ? flatFields(error.fields).confirm : undefined;
  return (
    <>
      <Button danger size={size} onClick={() => setOpen(true)} data-testid={`archive-${name}`}>
        {t("archive.action")}
      </Button>
      <Modal
        title={t("archive.title").replace("{name}", name)}
        open={open}
        onCancel={close}
        okText={t("archive.action")}
        cancelText={t("common.cancel")}
        okButtonProps={
          { danger: true, disabled: typed !== name, loading: m.isPending, "data-testid": "archive-confirm" } as ButtonProps
        }
        onOk={() =>
          m.mutate(typed, {
            onSuccess: () => {
              message.success(t("archive.done").replace("{name}", name));
              close();
              onArchived?.();
            },
          })
        }
        destroyOnHidden
      >
        <Typography.Paragraph>{t(`archive.${kind}` as Key)}</Typography.Paragraph>
        <label htmlFor={inputId}>{t("archive.typeName").replace("{name}", name)}</label>
        <Input
          id={inputId}
          value={typed}
          autoComplete="off"
          spellCheck={false}
          onChange={(e) => setTyped(e.target.value)}
          onPressEnter={() => typed === name && !m.isPending && m.mutate(typed)}
          status={confirmError ? "error" : undefined}
          data-testid="archive-name"
          style={{ marginTop: 4, marginBottom: 8 }}
        />
        {m.error && (
          <Alert
            type="error"
            role="alert"
            message={m.error instanceof Error ? m.error.message : String(m.error)}
            description={confirmError}
          />
        )}
      </Modal>
    </>
  );
}

/** Bring an archived one back (the API answers 409 with its reason when it cannot). */
export function RestoreButton({ kind, id, name, size }: { kind: ArchiveKind; id: string; name: string; size?: "small" }) {
  const { t } = useI18n();
  const { message } = App.useApp();
  const m = useLifecycle(kind, id, "restore");
  return (
    <Button
      size={size}
      loading={m.isPending}
      data-testid={`restore-${name}`}
      onClick={() =>
        m.mutate(undefined, {
          onSuccess: () => message.success(t("archive.restored").replace("{name}", name)),
          onError: (e) => message.error(e instanceof Error ? e.message : String(e)),
        })
      }
    >
      {t("archive.restore")}
    </Button>
  );
}

/** The "Archived" badge, with when it was archived. */
export function ArchivedTag({ at }: { at: string | null | undefined }) {
  const { t } = useI18n();
  if (!at) return null;
  return (
    <Tag title={t("archive.since").replace("{at}", fmtTime(at))} data-testid="archived-tag">
      {t("archive.badge")}
    </Tag>
  );
}

/** The lists' "Show archived" switch: on, the list asks for ?archived=true. */
export function ShowArchived({ checked, onChange }: { checked: boolean; onChange: (v: boolean) => void }) {
  const { t } = useI18n();
  const id = useId();
  return (
    <Space>
      <Switch id={id} size="small" checked={checked} onChange={onChange} data-testid="show-archived" />
      <label htmlFor={id}>{t("archive.show")}</label>
    </Space>
  );
}

/** A name with its badge when archived. */
export function NameWithBadge({ name, archivedAt }: { name: ReactNode; archivedAt?: string | null }) {
  return (
    <Space size={4}>
      {name}
      <ArchivedTag at={archivedAt} />
    </Space>
  );
}
