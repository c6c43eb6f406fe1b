// A dataset's upload: files or a directory into a new version, with progress; an unfinished
// version resumed or discarded.
import { useRef, useState } from "react";
import { Alert, Button, Progress, Space, Typography } from "antd";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { relPath, uploadVersion } from "../../datasetUpload";
import { api, unwrap } from "../../api/client";
import { useI18n } from "../../i18n";
import { ErrorState } from "../../components/common";

/** Upload files or a directory as a version. An upload that stopped (network, closed tab)
 * leaves its version open: picking the same files again resumes it (datasetUpload.ts). */
export function DatasetUpload({ id, open }: { id: string; open: number | null }) {
  const { t } = useI18n();
  const qc = useQueryClient();
  const filesRef = useRef<HTMLInputElement>(null);
  const dirRef = useRef<HTMLInputElement>(null);
  const [progress, setProgress] = useState<number | null>(null);
  const [done, setDone] = useState<number | null>(null);
  const [error, setError] = useState<unknown>(null);
  const refresh = () => {
    qc.invalidateQueries({ queryKey: ["dataset-versions", id] });
    qc.invalidateQueries({ queryKey: ["datasets"] });
  };
  const discard = useMutation({
    mutationFn: async (n: number) =>
      unwrap(
        await api.DELETE("/api/v1/datasets/{dataset_pk}/versions/{number}/", {
          params: { path: { dataset_pk: id, number: String(n) } },
        }),
      ),
    onSuccess: refresh,
    onError: setError,
  });
  const start = async (list: FileList | null) => {
    if (!list || list.length === 0) return;
    const files = Array.from(list).map((f) => ({ path: relPath(f), blob: f as Blob }));
    setError(null);
    setDone(null);
    try {
      const n = await uploadVersion(id, files, (sent, total) => setProgress(total ? Math.floor((sent * 100) / total) : 100));
      setDone(n);
    } catch (e) {
      setError(e);
    } finally {
      setProgress(null);
      refresh();
    }
  };
  const busy = progress !== null;
  return (
    <Space direction="vertical" style={{ width: "100%" }}>
      {open !== null && !busy && (
        <Alert
          type="warning"
          showIcon
          data-testid="upload-unfinished"
          message={t("catalog.unfinished").replace("{n}", String(open))}
          action={
            <Button size="small" danger loading={discard.isPending} onClick={() => discard.mutate(open)}>
              {t("catalog.discard")}
            </Button>
          }
        />
      )}
      <Space>
        <input
          ref={filesRef}
          type="file"
          multiple
          hidden
          aria-label={t("catalog.uploadFiles")}
          data-testid="upload-files"
          onChange={(e) => {
            start(e.target.files);
            e.target.value = ""; // the same files may be picked again to resume
          }}
        />
        <input
          ref={dirRef}
          type="file"
          multiple
          hidden
          aria-label={t("catalog.uploadDir")}
          {...({ webkitdirectory: "" } as object)}
          onChange={(e) => {
            start(e.target.files);
            e.target.value = "";
          }}
        />
        <Button disabled={busy} onClick={() => filesRef.current?.click()}>
          {open !== null ? t("catalog.resumeFiles") : t("catalog.uploadFiles")}
        </Button>
        <Button disabled={busy} onClick={() => dirRef.current?.click()}>
          {open !== null ? t("catalog.resumeDir") : t("catalog.uploadDir")}
        </Button>
      </Space>
      {busy && <Progress percent={progress} aria-label={t("catalog.uploading")} data-testid="upload-progress" />}
      {done !== null && <Alert type="success" showIcon message={t("catalog.uploaded").replace("{n}", String(done))} />}
      {error !== null && (
        <>
          <ErrorState error={error} />
          <Typography.Text type="secondary" data-testid="upload-resume-hint">
            {t("catalog.resumeHint")}
          </Typography.Text>
        </>
      )}
    </Space>
  );
}
