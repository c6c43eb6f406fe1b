// The live log tail: virtualised (only the visible rows are in the DOM), follow/pause, search
// within (matches highlighted, next/previous), jump to the first error, download. Holds at
// most MAX_LINES lines (the oldest are dropped; the full log stays in search and the logs API).
// Rows have one fixed height, so the visible window is arithmetic on scrollTop: a frame costs
// the visible rows whatever the number held (a general virtualiser measures every row again
// when the count changes, 60 times a second at 2,000 lines/s).
// The lines live in a LineStore the page may own: lines that arrive before the view is drawn
// (a finished job's whole backlog, when the socket answers before the job's details) are kept
// and drawn when it mounts.
import {
  forwardRef,
  useCallback,
  useEffect,
  useImperativeHandle,
  useLayoutEffect,
  useMemo,
  useRef,
  useState,
} from "react";
import { Button, Input, Space, Switch, Typography } from "antd";
import { useI18n } from "../i18n";

export type Line = { stream: string; message: string; level?: string | null; attempt?: number; offset?: number };
export const MAX_LINES = 1_000_000;
const ROW = 18;
const OVERSCAN = 20;
const TRIM = 10_000; // past MAX_LINES, this many more of the oldest go at once (one splice per 10k)
const ERROR_RE = /\b(error|exception|traceback|fatal)\b/i;

export const isError = (l: Line) => l.level === "ERROR" || l.level === "CRITICAL" || ERROR_RE.test(l.message);

export type LogViewHandle = { append: (lines: Line[]) => void; clear: () => void; count: () => number };

/** The lines a log view draws, appended and cleared whether or not a view is mounted. */
export class LineStore {
  current: Line[] = [];
  private listeners = new Set<() => void>();

  append(batch: Line[]) {
    const arr = this.current;
    for (const l of batch) arr.push(l);
    if (arr.length > MAX_LINES) arr.splice(0, arr.length - MAX_LINES + TRIM);
    this.changed();
  }

  clear() {
    this.current = [];
    this.changed();
  }

  /** Calls `listener` after each change; returns the unsubscribe. */
  subscribe(listener: () => void) {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  private changed() {
    for (const listener of this.listeners) listener();
  }
}

type LogViewProps = { height?: number; filename?: string; initialFocus?: number; store?: LineStore };

export const LogView = forwardRef<LogViewHandle, LogViewProps>(
  function LogView({ height = 480, filename = "job.log", initialFocus, store }, ref) {
    const { t } = useI18n();
    const own = useRef<LineStore | null>(null);
    if (!store && !own.current) own.current = new LineStore();
    const lines = (store ?? own.current)!;
    const [version, setVersion] = useState(0);
    const [follow, setFollow] = useState(true);
    const [query, setQuery] = useState("");
    const [hitIndex, setHitIndex] = useState(0);
    const pending = useRef(false);
    const parent = useRef<HTMLDivElement>(null);

    // Batches arriving within one frame are drawn once.
    const schedule = useCallback(() => {
      if (pending.current) return;
      pending.current = true;
      requestAnimationFrame(() => {
        pending.current = false;
        setVersion((v) => v + 1);
      });
    }, []);

    // drawn again after each change of the store, and once now for what came before
    useEffect(() => {
      const unsubscribe = lines.subscribe(schedule);
      schedule();
      return unsubscribe;
    }, [lines, schedule]);

    useImperativeHandle(
      ref,
      () => ({
        append: (batch) => lines.append(batch),
        clear: () => lines.clear(),
        count: () => lines.current.length,
      }),
      [lines],
    );

    const count = lines.current.length;
    const [scrollTop, setScrollTop] = useState(0);
    const rows = Math.ceil(height / ROW);
    // Following, the window is the last rows, known before the browser scrolls there.
    const top = follow ? Math.max(0, count * ROW - height) : scrollTop;
    const first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    const last = Math.min(count, Math.floor(top / ROW) + rows + OVERSCAN);

    useLayoutEffect(() => {
      const el = parent.current;
      if (follow && el) el.scrollTop = el.scrollHeight;
    }, [version, follow, count]);

    const scrollTo = useCallback(
      (i: number) => {
        const el = parent.current;
        const y = Math.max(0, i * ROW - height / 2 + ROW / 2);
        if (el) el.scrollTop = y;
        setScrollTop(y);
      },
      [height],
    );
    const onScroll = (e: React.UIEvent<HTMLDivElement>) => {
      const el = e.currentTarget;
      // a scrollbar dragged away from the end pauses following, as the wheel does
      if (follow && el.scrollTop + el.clientHeight < el.scrollHeight - 2 * ROW) setFollow(false);
      else if (!follow) setScrollTop(el.scrollTop); // following, the window needs no state
    };
    useLayoutEffect(() => {
      if (!follow && parent.current) setScrollTop(parent.current.scrollTop); // before paint
    }, [follow]);

    useEffect(() => {
      if (initialFocus != null && initialFocus < count) {
        setFollow(false);
        scrollTo(initialFocus);
      }
      // eslint-disable-next-line react-hooks/exhaustive-deps
    }, [initialFocus, count > 0]);

    const hits = useMemo(() => {
      if (!query) return [] as number[];
      const q = query.toLowerCase();
      const out: number[] = [];
      const arr = lines.current;
      for (let i = 0; i < arr.length; i++) if (arr[i].message.toLowerCase().includes(q)) out.push(i);
      return out;
      // eslint-disable-next-line react-hooks/exhaustive-deps
    }, [query, version]);
    const hitSet = useMemo(() => new Set(hits), [hits]);

    const goto = (i: number) => {
      setFollow(false);
      scrollTo(i);
    };
    const gotoHit = (n: number) => {
      if (!hits.length) return;
      const k = (n + hits.length) % hits.length;
      setHitIndex(k);
      goto(hits[k]);
    };
    const firstError = () => {
      const i = lines.current.findIndex(isError);
      if (i >= 0) goto(i);
    };
    const download = () => {
      const text = lines.current.map((l) => l.message).join("\n") + "\n";
      const a = document.createElement("a");
      a.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
      a.download = filename;
      a.click();
      URL.revokeObjectURL(a.href);
    };

    return (
      <div>
        <Space wrap style={{ marginBottom: 8 }}>
          <label>
            <Switch checked={follow} onChange={setFollow} data-testid="log-follow" aria-label={t("job.follow")} />{" "}
            {follow ? t("job.follow") : t("job.pause")}
          </label>
          <Input.Search
            aria-label={t("job.search")}
            placeholder={t("job.search")}
            allowClear
            onSearch={(v) => {
              setQuery(v);
              setHitIndex(0);
            }}
            style={{ width: 240 }}
            data-testid="log-search"
          />
          {query && (
            <>
              <Typography.Text data-testid="log-hits">
                {hits.length ? `${hitIndex + 1}/${hits.length}` : "0"}
              </Typography.Text>
              <Button size="small" onClick={() => gotoHit(hitIndex - 1)} aria-label="previous match">
                ↑
              </Button>
              <Button size="small" onClick={() => gotoHit(hitIndex + 1)} aria-label="next match">
                ↓
              </Button>
            </>
          )}
          <Button onClick={firstError} data-testid="log-first-error">
            {t("job.firstError")}
          </Button>
          <Button onClick={download}>{t("job.download")}</Button>
          <Typography.Text type="secondary" data-testid="log-count">
            {count} {t("job.lines")}
          </Typography.Text>
        </Space>
        <div
          ref={parent}
          className="log-view"
          style={{ height, overflow: "auto" }}
          tabIndex={0}
          role="log"
          aria-label={t("job.logs")}
          aria-live="off"
          data-testid="log-view"
          onWheel={(e) => e.deltaY < 0 && follow && setFollow(false)}
          onScroll={onScroll}
        >
          {count === 0 ? (
            <div className="log-line">{t("job.noLogs")}</div>
          ) : (
            <div style={{ height: count * ROW, position: "relative" }}>
              {Array.from({ length: last - first }, (_, k) => {
                const index = first + k;
                const l = lines.current[index];
                const cls = ["log-line", l.stream === "stderr" ? "stderr" : "", isError(l) ? "error" : "", hitSet.has(index) ? "hit" : ""]
                  .filter(Boolean)
                  .join(" ");
                return (
                  <div
                    key={index}
                    className={cls}
                    data-index={index}
                    style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${index * ROW}px)` }}
                  >
                    {l.message}
                  </div>
                );
              })}
            </div>
          )}
        </div>
      </div>
    );
  },
);
