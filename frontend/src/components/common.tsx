// What every page uses: job states and their tag, the loading, error, empty and forbidden states, times.
import { Alert, Button, Empty, Result, Spin, Tag } from "antd";
import type { ReactNode } from "react";
import dayjs from "dayjs";
import { ApiError, type JobState } from "../api/client";
import { useI18n } from "../i18n";

const STATE_COLORS: Record<string, string> = {
  PENDING: "default",
  QUEUED: "gold",
  SUBMITTED: "blue",
  RUNNING: "processing",
  RESTARTING: "orange",
  SUCCEEDED: "success",
  FAILED: "error",
  CANCELLED: "default",
  TIMEOUT: "volcano",
};

export const ACTIVE_STATES: JobState[] = ["PENDING", "QUEUED", "SUBMITTED", "RUNNING", "RESTARTING"];
export const ALL_STATES: JobState[] = [...ACTIVE_STATES, "SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"];

export function StateTag({ state }: { state: string }) {
  return (
    <Tag color={STATE_COLORS[state] ?? "default"} data-testid="job-state">
      {state}
    </Tag>
  );
}

export function Loading() {
  const { t } = useI18n();
  return (
    <div style={{ padding: 48, textAlign: "center" }} role="status">
      <Spin tip={t("common.loading")}>
        <span />
      </Spin>
    </div>
  );
}

/** An error that says what happened and what to do (retry, or sign in again). */
export function ErrorState({ error, onRetry }: { error: unknown; onRetry?: () => void }) {
  const { t } = useI18n();
  const message = error instanceof ApiError ? `${error.message} (${error.code})` : String(error);
  return (
    <Alert
      type="error"
      showIcon
      message={t("common.error")}
      description={message}
      action={onRetry ? <Button onClick={onRetry}>{t("common.retry")}</Button> : undefined}
    />
  );
}

export function EmptyState({ children, action }: { children?: ReactNode; action?: ReactNode }) {
  const { t } = useI18n();
  return <Empty description={children ?? t("common.none")}>{action}</Empty>;
}

export function Forbidden({ text }: { text: string }) {
  return <Result status="403" subTitle={text} />;
}

/** A time in the viewer's time zone, the same shape in every language. */
export function fmtTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  return dayjs(iso).format("YYYY-MM-DD HH:mm:ss");
}
