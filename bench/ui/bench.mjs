// The UI's speed in headless Chromium (started by bench/ui_pages.py, which prepares the jobs
// and the server). TORUS_BENCH_PARAMS: {base, user, loads, rate, seconds, hold}. Prints one
// JSON line {metrics, peers}.
import { createRequire } from "node:module";

const require = createRequire(new URL("../../frontend/package.json", import.meta.url));
const { chromium } = require("playwright-core");
const P = JSON.parse(process.env.TORUS_BENCH_PARAMS);
const err = (...a) => console.error("[ui bench]", ...a);

function pct(values) {
  const v = [...values].sort((a, b) => a - b);
  const pick = (q) => Math.round(v[Math.min(v.length - 1, Math.floor(q * v.length))] * 100) / 100;
  return { p50: pick(0.5), p95: pick(0.95), max: pick(1), n: v.length };
}

// Long tasks, recorded from the first byte of every page.
const LONGTASKS = () => {
  window.__longtasks = [];
  new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__longtasks.push(e.startTime + e.duration))).observe({
    type: "longtask",
    buffered: true,
  });
};

async function signIn(page) {
  await page.goto(`${P.base}/login`);
  await page.getByTestId("login-username").fill(P.user.username);
  await page.getByTestId("login-password").fill(P.user.password);
  await page.getByTestId("login-submit").click();
  await page.getByTestId("whoami").waitFor();
}

/** Frame intervals (ms) from requestAnimationFrame over `ms`. */
const frames = (ms) =>
  new Promise((resolve) => {
    const out = [];
    let last = performance.now();
    const end = last + ms;
    const tick = (t) => {
      out.push(t - last);
      last = t;
      if (t < end) requestAnimationFrame(tick);
      else resolve(out.slice(1));
    };
    requestAnimationFrame(tick);
  });

const dropped = (intervals) => intervals.reduce((n, d) => n + Math.max(0, Math.round(d / (1000 / 60)) - 1), 0);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH,
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--enable-precise-memory-info"],
});
const metrics = {};
const peers = {};
try {
  // 1. First load of the built UI (cold cache): bytes over the wire and time to a usable form.
  const firstLoad = [];
  const firstBytes = [];
  for (let i = 0; i < P.loads; i++) {
    const ctx = await browser.newContext();
    await ctx.addInitScript(LONGTASKS);
    const page = await ctx.newPage();
    await page.goto(`${P.base}/login`);
    await page.getByTestId("login-submit").waitFor();
    await page.waitForTimeout(500);
    const m = await page.evaluate(() => {
      const nav = performance.getEntriesByType("navigation")[0];
      const res = performance.getEntriesByType("resource");
      const bytes = nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0);
      const visible = performance.now(); // upper bound, the form was there before
      const lastLong = Math.max(0, ...window.__longtasks);
      return { bytes, lastLong, domContentLoaded: nav.domContentLoadedEventEnd, visible };
    });
    firstLoad.push(Math.max(m.lastLong, m.domContentLoaded));
    firstBytes.push(m.bytes);
    await ctx.close();
  }
  metrics.first_load_bytes = firstBytes[0];
  metrics.first_load_tti_ms = pct(firstLoad);

  // 2. The jobs page with the project's jobs (signed in, assets cached as after sign-in).
  const ctx = await browser.newContext({ viewport: { width: 1366, height: 900 } });
  await ctx.addInitScript(LONGTASKS);
  const page = await ctx.newPage();
  await signIn(page);
  const tti = [];
  const rowsAt = [];
  for (let i = 0; i < P.loads; i++) {
    await page.goto(`${P.base}/jobs?page_size=25`);
    await page.locator(".ant-table-row").nth(24).waitFor({ timeout: 60_000 });
    const t = await page.evaluate(() => performance.now());
    await page.waitForTimeout(700); // a quiet window after the rows came
    const lastLong = await page.evaluate(() => Math.max(0, ...window.__longtasks));
    rowsAt.push(t);
    tti.push(Math.max(t, lastLong));
  }
  metrics.jobs_page_rows_visible_ms = pct(rowsAt);
  metrics.jobs_page_tti_ms = pct(tti);
  peers.jobs_api_request_ms = pct(
    await page.evaluate(async () => {
      const out = [];
      for (let i = 0; i < 7; i++) {
        const t0 = performance.now();
        const r = await fetch("/api/v1/jobs/?page_size=25", { credentials: "same-origin" });
        await r.json();
        out.push(performance.now() - t0);
      }
      return out;
    }),
  );
  const jobId = await page.evaluate(async () => (await (await fetch("/api/v1/jobs/?page_size=1")).json()).results[0].id);

  // 3. The live log view fed `rate` lines/s over a stand-in websocket (the server caps what one
  // viewer gets; this measures the page), then `hold` lines in all.
  let seq = 0;
  const line = () => ({ attempt_number: 1, stream: "stdout", offset: seq * 64, timestamp: "2026-01-01T00:00:00Z", level: null, message: `step=${seq++} loss=${(1 / (seq + 1)).toFixed(6)} lr=0.001 samples/s=1234.5` });
  let socket;
  await page.routeWebSocket(/\/ws\/jobs\//, (ws) => {
    socket = ws;
    ws.send(JSON.stringify({ type: "backlog", state: "RUNNING", reason: "", streams: {}, lines: [] }));
  });
  await page.goto(`${P.base}/jobs/${jobId}`);
  await page.getByTestId("log-view").waitFor();
  while (!socket) await page.waitForTimeout(50);
  const cdp = await ctx.newCDPSession(page);
  await cdp.send("Performance.enable");
  const heap = async () => {
    await cdp.send("HeapProfiler.collectGarbage");
    const { metrics: m } = await cdp.send("Performance.getMetrics");
    return m.find((x) => x.name === "JSHeapUsedSize").value;
  };
  const heap0 = await heap();
  const perTick = P.rate / 10;
  const feed = setInterval(() => socket.send(JSON.stringify({ type: "lines", lines: Array.from({ length: perTick }, line) })), 100);
  const intervals = await page.evaluate(frames, P.seconds * 1000);
  clearInterval(feed);
  metrics.log_view_frame_ms = pct(intervals);
  metrics.log_view_dropped_frames = dropped(intervals);
  metrics.log_view_lines_fed = seq;
  metrics.log_view_seconds = P.seconds;
  // fill to `hold` lines in big batches, then weigh the heap
  while (seq < P.hold) {
    socket.send(JSON.stringify({ type: "lines", lines: Array.from({ length: Math.min(20_000, P.hold - seq) }, line) }));
    await page.waitForTimeout(20);
  }
  await page.getByTestId("log-count").filter({ hasText: `${P.hold} ` }).waitFor({ timeout: 120_000 });
  const heap1 = await heap();
  metrics.log_view_lines_held = P.hold;
  metrics.log_view_heap_mb_before = Math.round(heap0 / 1e5) / 10;
  metrics.log_view_heap_mb_holding = Math.round(heap1 / 1e5) / 10;
  metrics.log_view_heap_bytes_per_line = Math.round((heap1 - heap0) / P.hold);
  const still = await page.evaluate(frames, 2000);
  metrics.log_view_frame_ms_holding = pct(still);

  // Peer: the same stream appended to a <pre> (no virtualisation), in the same browser.
  const naive = await ctx.newPage();
  await naive.setContent('<pre id="p" style="height:480px;overflow:auto;font:12px monospace"></pre>');
  const naiveIntervals = await naive.evaluate(
    ({ rate, seconds }) => {
      const pre = document.getElementById("p");
      let n = 0;
      const timer = setInterval(() => {
        const text = Array.from({ length: rate / 10 }, () => `step=${n++} loss=0.5 lr=0.001 samples/s=1234.5\n`).join("");
        pre.appendChild(document.createTextNode(text));
        pre.scrollTop = pre.scrollHeight;
      }, 100);
      return new Promise((resolve) => {
        const out = [];
        let last = performance.now();
        const end = last + seconds * 1000;
        const tick = (t) => {
          out.push(t - last);
          last = t;
          if (t < end) requestAnimationFrame(tick);
          else {
            clearInterval(timer);
            resolve(out.slice(1));
          }
        };
        requestAnimationFrame(tick);
      });
    },
    { rate: P.rate, seconds: P.seconds },
  );
  peers.naive_pre_frame_ms = pct(naiveIntervals);
  peers.naive_pre_dropped_frames = dropped(naiveIntervals);
} finally {
  await browser.close();
}
console.log(JSON.stringify({ metrics, peers }));
