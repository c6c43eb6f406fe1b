// Follows one job over /ws/jobs/{id}/ (apps/logs/consumers.py): backlog, then lines, metrics,
// state changes and stream ends. Reconnects with backoff unless the server refused (44xx).
import { useEffect, useRef } from "react";
import { wsUrl } from "../api/client";

export type WsLine = {
  attempt_number: number;
  stream: string;
  offset: number;
  timestamp: string;
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

export function useJobSocket(
  jobId: string | undefined,
  onMessage: (m: WsMessage) => void,
  opts: { tail?: number; enabled?: boolean } = {},
) {
  const handler = useRef(onMessage);
  handler.current = onMessage;
  const { tail = 200, enabled = true } = opts;
  useEffect(() => {
    if (!jobId || !enabled) return;
    let ws: WebSocket | null = null;
    let closed = false;
    let delay = 1000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const open = () => {
      ws = new WebSocket(wsUrl(`/ws/jobs/${jobId}/?tail=${tail}`));
      ws.onopen = () => (delay = 1000);
      ws.onmessage = (ev) => handler.current(JSON.parse(ev.data) as WsMessage);
      ws.onclose = (ev) => {
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
  }, [jobId, tail, enabled]);
}
