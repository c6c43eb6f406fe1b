// A finished job's page shows its lines (tests/e2e/test_job_log_view.py): jobs that end one
// after another, each opened by a free page the moment the jobs list says it has ended; every
// expected line must appear in the log view, each once. Started like run.mjs:
//   TORUS_E2E_PARAMS  JSON: {base, user: {username, password}, word, jobs: {id: [line, ...]},
//                     pages: how many pages open jobs at once}
//   CHROMIUM_PATH     the browser
// Prints one JSON line, {jobs: {id: {found, missing, firstCount, count, openedMs, empty,
// frames (the socket's backlog and line messages, by size)}}}, exit 0;
// or the failure, exit 1. A job whose lines do not appear is reported, not thrown, so one run
// shows them all.
import { chromium } from "playwright-core";

const params = JSON.parse(process.env.TORUS_E2E_PARAMS ?? "{}");
const { base, user, word, jobs } = params;
const ENDED = ["SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT"];
const LINES_WITHIN_MS = 10_000;
const SETTLE_MS = 1_500; // lines shipped after the backlog must not show twice
const report = { jobs: {}, consoleErrors: [] };

async function signIn(page) {
  await page.goto(`${base}/`);
  await page.getByTestId("login-username").fill(user.username);
  await page.getByTestId("login-password").fill(user.password);
  await page.getByTestId("login-submit").click();
  await page.getByTestId("whoami").filter({ hasText: user.username }).waitFor();
}

/** {id: ended at (ms, this clock)} of the jobs the list says have ended, polled every 100 ms. */
function watchEnds(page, ended, stop) {
  return (async () => {
    const states = ENDED.join(",");
    while (!stop.done) {
      const ids = await page.evaluate(
        async ([w, s]) => {
          const r = await fetch(`/api/v1/jobs/?name=${encodeURIComponent(w)}&state=${s}&page_size=100`);
          return r.ok ? (await r.json()).results.map((j) => j.id) : [];
        },
        [word, states],
      );
      for (const id of ids) if (!(id in ended)) ended[id] = Date.now();
      await page.waitForTimeout(100);
    }
  })();
}

async function openJob(page, id, endedAt) {
  const opened = Date.now();
  const frames = []; // what the job's socket brought: the backlog's size, then live lines
  const onSocket = (ws) => {
    if (!ws.url().includes(`/ws/jobs/${id}/`)) return;
    ws.on("framereceived", ({ payload }) => {
      const m = JSON.parse(payload);
      if (m.type === "backlog") frames.push(`backlog:${m.lines.length}`);
      else if (m.type === "lines") frames.push(`lines:${m.lines.length}`);
    });
  };
  page.on("websocket", onSocket);
  await page.goto(`${base}/jobs/${id}`);
  await page.getByTestId("job-name").waitFor();
  const view = page.getByTestId("log-view");
  const found = [];
  const missing = [];
  for (const line of jobs[id]) {
    try {
      await view.getByText(line, { exact: true }).waitFor({ timeout: found.length || missing.length ? 1_000 : LINES_WITHIN_MS });
      found.push(line);
    } catch {
      missing.push(line);
    }
  }
  const firstCount = await page.getByTestId("log-count").innerText();
  await page.waitForTimeout(SETTLE_MS);
  report.jobs[id] = {
    found,
    missing,
    firstCount,
    count: await page.getByTestId("log-count").innerText(),
    openedMs: opened - endedAt,
    empty: await view.getByText("No log lines yet.").isVisible(),
    frames,
  };
  page.off("websocket", onSocket);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let code = 0;
try {
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 }, locale: "en-US" });
  await context.addInitScript(() => localStorage.setItem("torus.lang", "en"));
  const watcher = await context.newPage();
  watcher.setDefaultTimeout(30_000);
  await signIn(watcher); // the context's session: every page of it is signed in
  const ended = {};
  const stop = { done: false };
  const watching = watchEnds(watcher, ended, stop);
  const waiting = new Set(Object.keys(jobs));
  const deadline = Date.now() + 150_000;
  const worker = async () => {
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on("pageerror", (e) => report.consoleErrors.push(`pageerror: ${e.message}`));
    while (waiting.size) {
      if (Date.now() > deadline) throw new Error(`jobs never ended: ${[...waiting].join(", ")}`);
      // the job that ended first of those not yet opened
      const next = [...waiting].filter((id) => id in ended).sort((a, b) => ended[a] - ended[b])[0];
      if (!next) {
        await page.waitForTimeout(50);
        continue;
      }
      waiting.delete(next);
      await openJob(page, next, ended[next]);
    }
  };
  await Promise.all(Array.from({ length: params.pages ?? 2 }, worker));
  stop.done = true;
  await watching;
} catch (e) {
  console.error(`job_logs failed: ${e.stack ?? e}`);
  console.error(`report so far: ${JSON.stringify(report)}`);
  code = 1;
} finally {
  await browser.close();
}
if (!code) console.log(JSON.stringify(report));
process.exit(code);
