// Live sockets (apps/logs/consumers.py), reconnecting with backoff unless the server closed
// them with a reason (44xx; 4401, signed out, also ends the page's session): one job over
// /ws/jobs/{id}/ (backlog, then lines, metrics, state changes and stream ends), and a jobs
// list over /ws/tenants/{id}/jobs/ (every state change of the tenant's jobs), and the bell over
// /ws/notifications/ (each event of the person's subscriptions).
import { useCallback, useEffect, useRef } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { session, wsUrl } from "../api/client";

export type WsLine = {
  attempt_number: number;
  stream: string;
  offset: number;
  timestamp: string | null; // null: a line read from an ended attempt's log that carries no time
  level: string | null;
  message: string;
};
export type WsMessage =
  | { type: "backlog"; state: string; reason: string; lines: WsLine[] }
  | { type: "lines"; lines: WsLine[] }
  | { type: "metrics"; points: { step: number; name: string; value: number }[] }
  | { type: "state"; state: string; from: string; reason: string; at: string; attempt: number }
  | { type: "stream_end"; attempt: number; stream: string }
  | { type: "skipped"; count: number };

export type JobStateChange = {
  job: string;
  project: string;
  state: string;
  from: string;
  reason: string;
  at: string;
  attempt: number | null;
};
export type JobsMessage =
  | { type: "subscribed"; tenant: string; project: string | null }
  | { type: "states"; changes: JobStateChange[] };

/** A websocket on `path` (null: none) that comes back after a drop; messages go to the latest
 * `onMessage`. */
function useLiveSocket<M>(path: string | null, onMessage: (m: M) => void) {
  const handler = useRef(onMessage);
  handler.current = onMessage;
  useEffect(() => {
    if (!path) return;
    let ws: WebSocket | null = null;
    let closed = false;
    let delay = 1000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const open = () => {
      ws = new WebSocket(wsUrl(path));
      ws.onopen = () => (delay = 1000);
      ws.onmessage = (ev) => handler.current(JSON.parse(ev.data) as M);
      ws.onclose = (ev) => {
        if (ev.code === 4401) session.onExpired(); // signed out: the sign-in form, saying so
        if (closed || (ev.code >= 4400 && ev.code < 4500)) return;
        timer = setTimeout(open, delay);
        delay = Math.min(delay * 2, 30_000);
      };
    };
    open();
    return () => {
      closed = true;
      clearTimeout(timer);
      ws?.close();
    };
  }, [path]);
}

export function useJobSocket(
  jobId: string | undefined,
  onMessage: (m: WsMessage) => void,
  opts: { tail?: number; enabled?: boolean } = {},
) {
  const { tail = 200, enabled = true } = opts;
  useLiveSocket(jobId && enabled ? `/ws/jobs/${jobId}/?tail=${tail}` : null, onMessage);
}

/** The state changes of a tenant's jobs (one project's when `project` is set). After a
 * reconnect ("subscribed" again) changes may have been missed: the caller refreshes. */
export function useTenantJobsSocket(
  tenantId: string | undefined,
  project: string | null | undefined,
  onMessage: (m: JobsMessage) => void,
) {
  const query = project ? `?project=${encodeURIComponent(project)}` : "";
  useLiveSocket(tenantId ? `/ws/tenants/${tenantId}/jobs/${query}` : null, onMessage);
}

const REFRESH_AFTER_MS = 1000; // a burst of changes refreshes once, this long after its first

/** Keeps queries under `queryKey` fresh from the tenant's job state changes: `onChanges` sees
 * each batch at once, and the queries are fetched again once per burst, and after a reconnect
 * (changes may have been missed meanwhile). No polling. */
export function useLiveJobs(
  tenantId: string | undefined,
  project: string | null | undefined,
  queryKey: unknown[],
  onChanges?: (changes: JobStateChange[]) => void,
) {
  const qc = useQueryClient();
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  const subscriptions = useRef(0);
  const key = useRef(queryKey);
  key.current = queryKey;
  const changes = useRef(onChanges);
  changes.current = onChanges;
  useEffect(() => () => clearTimeout(timer.current), []);
  const onMessage = useCallback(
    (m: JobsMessage) => {
      if (m.type === "subscribed" && subscriptions.current++ === 0) return;
      if (m.type === "states") changes.current?.(m.changes);
      if (timer.current === undefined) {
        timer.current = setTimeout(() => {
          timer.current = undefined;
          qc.invalidateQueries({ queryKey: key.current });
        }, REFRESH_AFTER_MS);
      }
    },
    [qc],
  );
  useTenantJobsSocket(tenantId, project, onMessage);
}

export type BellItem = {
  event: string;
  event_id: string;
  job: string; // "" for a deployment's item
  deployment?: string;
  name: string;
  project: string;
  state: string;
  reason: string;
  at: string;
  tenant: string;
};
export type BellMessage = { type: "subscribed" } | { type: "items"; items: BellItem[] };

/** The bell's new items (apps/notifications/consumers.py), as they are made. */
export function useBellSocket(enabled: boolean, onMessage: (m: BellMessage) => void) {
  useLiveSocket(enabled ? "/ws/notifications/" : null, onMessage);
}
