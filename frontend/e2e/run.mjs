// End-to-end scenarios in a real headless Chromium (Debian's, driven by playwright-core),
// against a running Torus. Started by tests/e2e/*.py, which bring up the backend and pass
//   TORUS_E2E_PARAMS       JSON: {base, users: {role: {username, password}}, ...}
//   CHROMIUM_PATH          the browser
//   TORUS_E2E_SCREENSHOTS  where the pages' screenshots go (git ignores it)
// Usage: node e2e/run.mjs <scenario>. Prints one JSON line (what it saw) and exits 0, or
// prints the failure and exits 1. Every main page gets an axe-core check: no serious or
// critical violation.
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const AXE = require.resolve("axe-core/axe.min.js");
const params = JSON.parse(process.env.TORUS_E2E_PARAMS ?? "{}");
const shots = process.env.TORUS_E2E_SCREENSHOTS;
const base = params.base;
const report = { pages: [], axe: {}, consoleErrors: [] };
const axeFailures = []; // reported together at the end, so one run shows them all

function check(cond, message) {
  if (!cond) throw new Error(message);
}

async function newPage(browser, lang = "en", { timezoneId } = {}) {
  const context = await browser.newContext({
    viewport: { width: 1366, height: 900 },
    locale: lang === "zh" ? "zh-CN" : "en-US",
    ...(timezoneId ? { timezoneId } : {}),
  });
  // the starting language; a choice made in the page is kept across reloads
  await context.addInitScript((l) => localStorage.getItem("torus.lang") || localStorage.setItem("torus.lang", l), lang);
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (e) => report.consoleErrors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    // a refused request the page handles (401 before sign-in) is logged by the browser itself
    if (m.type() === "error" && !/Failed to load resource/.test(m.text())) report.consoleErrors.push(m.text());
  });
  return page;
}

async function signIn(page, user) {
  await page.goto(`${base}/`);
  await page.getByTestId("login-username").fill(user.username);
  await page.getByTestId("login-password").fill(user.password);
  await page.getByTestId("login-submit").click();
  await page.getByTestId("whoami").filter({ hasText: user.username }).waitFor();
}

/** axe-core on the page: fails on a serious or critical violation. */
async function axe(page, name) {
  await page.addScriptTag({ path: AXE });
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  report.axe[name] = result.map((v) => `${v.impact}:${v.id}`);
  const bad = result.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (bad.length) axeFailures.push(`axe on ${name}: ${JSON.stringify(bad)}`);
  if (bad.length) report.axeFailures = axeFailures;
}

async function visit(page, name, lang, { axeCheck = true } = {}) {
  await page.waitForLoadState("networkidle").catch(() => {});
  await page.locator(".ant-spin-spinning").first().waitFor({ state: "detached", timeout: 15_000 }).catch(() => {});
  // the pointer off whatever was just clicked, its hover colour faded (antd: 0.2 s), so axe
  // judges the page as it rests (a hovered default button is #4096ff on white, 3.0:1)
  await page.mouse.move(0, 0);
  await page.waitForTimeout(300);
  if (axeCheck) await axe(page, `${name}.${lang}`);
  if (shots) await page.screenshot({ path: `${shots}/${name}.${lang}.png`, fullPage: true });
  report.pages.push(`${name}.${lang}`);
}

/** Tab (never the mouse) until the focus is on an element matching `selector`. */
async function tabTo(page, selector, { limit = 80 } = {}) {
  await page.locator(selector).first().waitFor(); // the page has drawn it
  for (let i = 0; i < limit; i++) {
    await page.keyboard.press("Tab");
    if (await page.evaluate((sel) => !!document.activeElement?.matches(sel), selector)) return;
  }
  throw new Error(`${limit} Tabs did not reach ${selector}`);
}

/** An ISO time as fmtTime shows it (YYYY-MM-DD HH:mm:ss), in the given time zone. */
function inZone(iso, timeZone) {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat("en-CA", {
      timeZone, year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
    }).formatToParts(new Date(iso)).map((p) => [p.type, p.value]),
  );
  return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}`;
}

async function chooseOption(page, testId, label) {
  await page.getByTestId(testId).click();
  await page.locator(`.ant-select-dropdown:visible .ant-select-item-option[title="${label}"]`).click();
}

const scenarios = {

  // A member signs in, submits a job from the form, watches its lines arrive live, sees it
  // succeed and its loss curve, finds its line in log search; then the same pages in Chinese.
  async researcher(browser) {
    const { users, project, word } = params;
    const page = await newPage(browser, "en");
    await signIn(page, users.member);
    await visit(page, "home", "en");

    await page.goto(`${base}/jobs/new`);
    await page.getByTestId("field-name").fill(params.jobName);
    await chooseOption(page, "field-project", project);
    const script = `for i in $(seq 1 ${params.steps}); do echo "tick $i ${word}"; echo "torus-metric step=$i loss=$((1000 / i))"; sleep ${params.sleep}; done; echo "ERROR ${word} fake error line" >&2`;
    await page.getByTestId("field-command").fill(["bash", "-c", script].join("\n"));
    await visit(page, "submit", "en");
    await page.getByTestId("submit-button").click();
    await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
    report.jobId = page.url().split("/").pop();

    // live: lines arrive over the websocket while it runs
    await page.getByTestId("log-view").getByText(`tick 2 ${word}`, { exact: true }).waitFor({ timeout: 120_000 });
    report.sawRunning = await page.getByTestId("job-state").first().innerText();
    await page.getByTestId("job-state").filter({ hasText: "SUCCEEDED" }).first().waitFor({ timeout: 120_000 });
    await page.getByTestId("log-view").getByText(`tick ${params.steps} ${word}`, { exact: true }).waitFor();
    // the stderr line comes after the last tick: wait for the count to include it, then
    // report what is shown (the test compares)
    const expected = `${2 * params.steps + 1} lines`;
    await page.getByTestId("log-count").filter({ hasText: expected }).waitFor({ timeout: 30_000 }).catch(() => {});
    report.logCount = await page.getByTestId("log-count").innerText();
    await page.getByTestId("log-first-error").click();
    await page.getByTestId("log-view").getByText(`ERROR ${word} fake error line`).waitFor();
    await visit(page, "job-logs", "en");

    await page.getByRole("tab", { name: "Metrics" }).click();
    await page.getByTestId("chart").locator("canvas").first().waitFor();
    await visit(page, "job-metrics", "en");

    await page.goto(`${base}/logs?q=${encodeURIComponent(word)}`);
    await page.getByTestId("logsearch-total").waitFor();
    await page.getByTestId("logsearch-hits").getByText(`tick 1 ${word}`).waitFor({ timeout: 60_000 }).catch(async () => {
      await page.reload();
      await page.getByTestId("logsearch-hits").getByText(word).first().waitFor();
    });
    report.searchTotal = await page.getByTestId("logsearch-total").innerText();
    await visit(page, "logs", "en");
    await page.getByRole("link", { name: "Open in job log" }).first().click();
    await page.getByTestId("hit-context").waitFor();
    await page.getByTestId("hit-context").getByText(word).first().waitFor();

    await page.goto(`${base}/jobs`);
    await page.getByRole("link", { name: params.jobName }).waitFor();
    await visit(page, "jobs", "en");

    // Chinese, chosen in the page and remembered across a reload
    await chooseOption(page, "lang-switch", "简体中文");
    await page.getByRole("heading", { name: "作业" }).waitFor();
    await page.reload();
    await page.getByRole("heading", { name: "作业" }).waitFor();
    await visit(page, "jobs", "zh");
    for (const [name, path, heading] of [
      ["home", "/", "首页"],
      ["submit", "/jobs/new", "提交作业"],
      ["logs", `/logs?q=${encodeURIComponent(word)}`, "日志搜索"],
    ]) {
      await page.goto(`${base}${path}`);
      await page.getByRole("heading", { name: heading }).waitFor();
      await visit(page, name, "zh");
    }
    await page.goto(`${base}/jobs/${report.jobId}`);
    await page.getByRole("tab", { name: "日志" }).waitFor();
    await visit(page, "job-logs", "zh");
    await page.getByTestId("sign-out").click();
    await page.getByTestId("login-submit").waitFor();
  },

  // With the keyboard alone: sign in, reach the submit form by the navigation, fill and send
  // it. Times in the viewer's time zone (the browser's, here Asia/Kolkata, UTC+5:30). A
  // session ended elsewhere (its cookie gone) brings back the sign-in form, saying so.
  async people(browser) {
    const { users, project } = params;
    const timeZone = "Asia/Kolkata";
    const page = await newPage(browser, "en", { timezoneId: timeZone });
    await page.goto(`${base}/`);
    await tabTo(page, '[data-testid="login-username"]');
    await page.keyboard.type(users.member.username);
    await tabTo(page, '[data-testid="login-password"]');
    await page.keyboard.type(users.member.password);
    await page.keyboard.press("Enter");
    await page.getByTestId("whoami").filter({ hasText: users.member.username }).waitFor();

    await tabTo(page, 'a[href="/jobs/new"]');
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/jobs\/new$/);
    await tabTo(page, '[data-testid="field-name"]');
    await page.keyboard.type(params.jobName);
    await tabTo(page, '[data-testid="field-project"] input');
    await page.keyboard.type(project);
    await page.keyboard.press("Enter");
    await page.getByTestId("field-project").getByTitle(project).waitFor();
    await tabTo(page, '[data-testid="field-command"]');
    await page.keyboard.type("true");
    await tabTo(page, '[data-testid="submit-button"]');
    await page.keyboard.press("Enter");
    await page.waitForURL(/\/jobs\/[0-9a-f-]{36}$/);
    report.jobId = page.url().split("/").pop();

    const job = await (await page.request.get(`${base}/api/v1/jobs/${report.jobId}/`)).json();
    report.createdUtc = job.created_at;
    report.createdShown = inZone(job.created_at, timeZone);
    await page.getByRole("tab", { name: "Overview" }).click();
    await page.getByText(report.createdShown).first().waitFor();

    await page.context().clearCookies();
    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    await page.getByTestId("login-submit").waitFor();
    report.expiredSaid = await page.getByRole("status").innerText();
  },

  // A viewer sees no action they may not take.
  async viewer(browser) {
    const page = await newPage(browser, "en");
    await signIn(page, params.users.viewer);
    await page.goto(`${base}/jobs`);
    await page.getByRole("heading", { name: "Jobs" }).waitFor();
    check((await page.getByRole("link", { name: "Submit job" }).count()) === 0, "a viewer sees Submit job");
    if (params.signature) {
      // the failed job's failure signature is a tag in the list; the tag filters by it
      const tag = page.getByTestId("job-signature").filter({ hasText: params.signature });
      await tag.waitFor();
      await visit(page, "jobs-tagged", "en");
      await tag.click();
      await page.waitForURL((u) => u.searchParams.get("signature") === params.signature);
      report.tagFilter = new URL(page.url()).searchParams.get("signature");
    }
    check((await page.getByRole("link", { name: "Audit log" }).count()) === 0, "a viewer sees the audit log");
    await page.goto(`${base}/jobs/new`);
    await page.getByText("Your role in this tenant cannot submit jobs.").waitFor();
    check((await page.getByTestId("submit-button").count()) === 0, "a viewer sees a submit button");
    if (params.jobId) {
      await page.goto(`${base}/jobs/${params.jobId}`);
      await page.getByTestId("job-name").waitFor();
      for (const name of ["Cancel", "Restart", "Resubmit"])
        check((await page.getByRole("button", { name }).count()) === 0, `a viewer sees ${name}`);
    }
    await page.goto(`${base}/console/quotas`);
    await page.getByRole("heading", { name: "Quotas" }).waitFor();
    check((await page.getByRole("button", { name: "New quota" }).count()) === 0, "a viewer may add quotas");
    if (params.secretName) {
      await page.goto(`${base}/console/secrets`);
      await page.getByRole("cell", { name: params.secretName }).waitFor();
      for (const name of ["New secret", "Replace value", "Delete"])
        check((await page.getByRole("button", { name }).count()) === 0, `a viewer sees ${name} on secrets`);
    }
    report.viewerOk = true;
  },

  // A member sets a project secret through the hidden field; the page never shows the value,
  // not while typing, not after saving, not in a second dialog.
  async secrets(browser) {
    const page = await newPage(browser, "en");
    await signIn(page, params.users.member);
    await page.goto(`${base}/console/secrets`);
    await page.getByRole("heading", { name: "Secrets", exact: true }).waitFor();
    await page.getByTestId("secret-create").click();
    await page.getByTestId("secret-name").fill(params.secretName);
    const field = page.getByTestId("secret-value");
    await field.fill(params.secretValue);
    check((await field.getAttribute("type")) === "password", "the value field is not a password field");
    await visit(page, "admin-secrets-dialog", "en");
    check(!(await page.locator("body").innerText()).includes(params.secretValue), "the typed value shows");
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByRole("cell", { name: params.secretName }).waitFor();
    await page.getByTestId("secret-value").waitFor({ state: "detached" });
    await page.getByTestId(`secret-replace-${params.secretName}`).click();
    report.secondDialogValue = await page.getByTestId("secret-value").inputValue();
    report.pageHasValue = (await page.content()).includes(params.secretValue);
  },

  // A job waits on a project quota; the tenant admin raises it in the console; the job starts
  // and its page says so live.
  async quota(browser) {
    const page = await newPage(browser, "en");
    await signIn(page, params.users.admin);
    await page.goto(`${base}/jobs/${params.jobId}`);
    await page.getByTestId("why-waiting").filter({ hasText: "0 of 0 jobs running" }).waitFor({ timeout: 60_000 });
    report.waitingSaid = await page.getByTestId("why-waiting").innerText();
    // a second tab on the jobs list, left alone: the change must reach it over the websocket
    const list = await page.context().newPage();
    await list.goto(`${base}/jobs`);
    const row = list.getByRole("row").filter({ has: list.getByRole("link", { name: "waits", exact: true }) });
    await row.getByTestId("job-state").filter({ hasText: "PENDING" }).waitFor();
    const listFetches = [];
    list.on("request", (r) => r.url().includes("/api/v1/jobs/?") && listFetches.push(r.url()));
    await page.goto(`${base}/console/quotas`);
    await page.getByTestId("quota-edit").first().click();
    const dialog = page.getByRole("dialog");
    await dialog.getByLabel("Running jobs").fill("1");
    await dialog.getByRole("button", { name: "Save" }).click();
    await dialog.waitFor({ state: "hidden" });
    await page.getByRole("cell", { name: "1", exact: true }).first().waitFor();
    await page.goto(`${base}/jobs/${params.jobId}`);
    await page.getByTestId("job-state").filter({ hasText: /RUNNING|SUCCEEDED/ }).first().waitFor({ timeout: 120_000 });
    report.stateAfter = await page.getByTestId("job-state").first().innerText();
    await row.getByTestId("job-state").filter({ hasText: /QUEUED|SUBMITTED|RUNNING|SUCCEEDED/ }).waitFor({ timeout: 60_000 });
    report.listStateAfter = await row.getByTestId("job-state").innerText();
    report.listRefetches = listFetches.length; // refetched because it was told, never polled
  },

  // A member uploads a file into a dataset; the connection drops after the first chunk; the
  // upload stops uncommitted; after a reload, picking the same file resumes it where the
  // server's copy ends. The dataset and model panels (expanded rows, lineage) get axe checks.
  async catalogue(browser) {
    const page = await newPage(browser, "en");
    await signIn(page, params.users.member);
    const expand = async (path, heading) => {
      await page.goto(`${base}${path}`);
      await page.getByRole("heading", { name: heading, exact: true }).waitFor();
      await page.getByRole("button", { name: /expand row|展开行/i }).first().click();
    };
    await expand("/datasets", "Datasets");
    await page.getByTestId("compare-go").waitFor();
    await visit(page, "dataset-panel", "en");
    let blocked = true;
    await page.route("**/upload/?*", (route) => {
      const offset = new URL(route.request().url()).searchParams.get("offset");
      if (blocked && route.request().method() === "PUT" && offset !== "0") return route.abort("connectionreset");
      return route.continue();
    });
    await page.getByTestId("upload-files").setInputFiles(params.uploadFile);
    await page.getByTestId("upload-resume-hint").waitFor({ timeout: 120_000 });
    report.stopped = await page.locator(".ant-alert-error").first().innerText();
    blocked = false;
    await page.unroute("**/upload/?*");

    await page.reload();
    await page.getByRole("button", { name: /expand row/i }).first().click();
    await page.getByTestId("upload-unfinished").waitFor();
    await visit(page, "dataset-panel-unfinished", "en");
    const puts = [];
    page.on("request", (r) => r.method() === "PUT" && r.url().includes("/upload/?") && puts.push(new URL(r.url()).searchParams.get("offset")));
    await page.getByTestId("upload-files").setInputFiles(params.uploadFile);
    await page.getByText(/Uploaded and committed version \d+/).waitFor({ timeout: 120_000 });
    report.resumedOffsets = puts;

    await expand("/models", "Models");
    await page.getByTestId("lineage-1").click();
    await page.getByTestId("lineage").locator("canvas").first().waitFor();
    await page.getByText("Alias moves").waitFor(); // the production alias, set by the test
    await visit(page, "model-panel", "en");

    await chooseOption(page, "lang-switch", "简体中文");
    await expand("/datasets", "数据集");
    await page.getByTestId("compare-go").waitFor();
    await visit(page, "dataset-panel", "zh");
    await expand("/models", "模型");
    await page.getByTestId("lineage-1").click();
    await page.getByTestId("lineage").locator("canvas").first().waitFor();
    await page.getByText("别名变更记录").waitFor();
    await visit(page, "model-panel", "zh");
  },

  // Model deployments: a member deploys the registered tiny model from the form (the fit
  // estimate shown first), sees it READY with its replica and the replica's job, makes a key
  // (shown once) and sends requests with it through the gateway, sees the request-rate chart;
  // the pages in English and Chinese with axe; a viewer sees no action.
  async deployments(browser) {
    const { users, project, model, requests } = params;
    const page = await newPage(browser, "en");
    await signIn(page, users.member);
    await page.goto(`${base}/deployments`);
    await page.getByRole("heading", { name: "Deployments", exact: true }).waitFor();
    await page.getByTestId("deployments-empty").waitFor();
    await visit(page, "deployments-empty", "en");

    await page.getByTestId("deploy-button").click();
    await page.getByRole("heading", { name: "Deploy a model" }).waitFor();
    await page.getByTestId("deploy-name").fill(params.name);
    await chooseOption(page, "deploy-project", project);
    await chooseOption(page, "deploy-model", model);
    await chooseOption(page, "deploy-ref", "@production → v1");
    await page.getByTestId("deploy-slots").fill("2");
    await page.getByTestId("deploy-context").fill("512");
    const fit = page.getByTestId("fit-result");
    // the test asserts what it said (reported rather than thrown here, so a run shows the rest)
    await fit.waitFor({ timeout: 30_000 }).catch(() => {});
    report.fits = (await fit.count()) ? await fit.getAttribute("data-fits") : null;
    report.fitText = await page.getByTestId("fit-card").innerText();
    await visit(page, "deploy", "en");
    await page.getByTestId("deploy-submit").click();
    await page.waitForURL(/\/deployments\/[0-9a-f-]{36}$/);
    report.deploymentId = page.url().split("/").pop();

    // READY with its replica, whose job's page is one click away
    await page.getByTestId("deployment-state").filter({ hasText: "READY" }).waitFor({ timeout: 240_000 });
    await page.getByTestId("replica-state").filter({ hasText: "READY" }).first().waitFor({ timeout: 60_000 });
    report.replicas = await page.getByTestId("deployment-replicas").first().innerText();
    report.replicaJob = (await page.getByTestId("replica-job").first().getAttribute("href")).split("/").pop();
    await visit(page, "deployment", "en");

    // a key, shown once, used for requests through the gateway from this page
    await page.getByRole("tab", { name: "Keys" }).click();
    await page.getByTestId("key-create").click();
    const dialog = page.getByRole("dialog");
    await dialog.getByTestId("key-name").fill("e2e");
    await dialog.getByRole("button", { name: "Save" }).click();
    await dialog.waitFor({ state: "hidden" });
    const token = (await page.getByTestId("key-token").innerText()).trim();
    check(token.startsWith("tsk_"), `the key shown is ${token}`);
    report.key = token; // the test's own key, to compare with the hash the platform kept
    await visit(page, "deployment-keys", "en");
    report.statuses = await page.evaluate(
      async ({ id, token, n }) => {
        const out = [];
        for (let i = 0; i < n; i++) {
          const r = await fetch(`/serve/${id}/v1/completions`, {
            method: "POST",
            headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
            body: JSON.stringify({ prompt: `Once upon a time ${i}`, max_tokens: 8 }),
          });
          await r.text();
          out.push(r.status);
        }
        return out;
      },
      { id: report.deploymentId, token, n: requests },
    );

    // the request-rate chart (the gateway writes its records in batches; the page refetches)
    await page.getByRole("tab", { name: "Traffic" }).click();
    for (let i = 0; i < 12 && !(await page.getByTestId("usage-rate").count()); i++) {
      await page.waitForTimeout(2_500);
      await page.reload();
      await page.getByRole("tab", { name: "Traffic" }).click();
      await page.getByTestId("usage-rate").or(page.getByTestId("usage-empty")).first().waitFor();
    }
    await page.getByTestId("usage-rate").locator("canvas").first().waitFor();
    await page.getByTestId("usage-latency").locator("canvas").first().waitFor();
    await page.getByTestId("usage-tokens").locator("canvas").first().waitFor();
    await visit(page, "deployment-traffic", "en");
    await page.getByRole("tab", { name: "Events" }).click();
    await page.getByTestId("deployment-event").filter({ hasText: "replica_ready" }).first().waitFor();
    report.events = await page.getByTestId("deployment-event").evaluateAll((els) => els.map((e) => e.dataset.kind));
    await visit(page, "deployment-events", "en");
    await page.goto(`${base}/deployments`);
    await page.getByRole("link", { name: params.name }).waitFor();
    await visit(page, "deployments", "en");

    // Chinese, chosen in the page
    await chooseOption(page, "lang-switch", "简体中文");
    await page.getByRole("heading", { name: "模型部署", exact: true }).waitFor();
    await visit(page, "deployments", "zh");
    await page.goto(`${base}/deployments/${report.deploymentId}`);
    await page.getByRole("tab", { name: "事件" }).waitFor();
    await page.getByTestId("replica-job").first().waitFor();
    await visit(page, "deployment", "zh");
    await page.getByRole("tab", { name: "流量" }).click();
    await page.getByTestId("usage-rate").locator("canvas").first().waitFor();
    await visit(page, "deployment-traffic", "zh");
    await page.goto(`${base}/deployments/new`);
    await page.getByRole("heading", { name: "部署模型" }).waitFor();
    await visit(page, "deploy", "zh");
    await page.context().close();

    // a viewer: the pages, no action
    const viewer = await newPage(browser, "en");
    await signIn(viewer, users.viewer);
    await viewer.goto(`${base}/deployments`);
    await viewer.getByRole("link", { name: params.name }).waitFor();
    check((await viewer.getByTestId("deploy-button").count()) === 0, "a viewer sees Deploy");
    await viewer.getByRole("link", { name: params.name }).click();
    await viewer.getByTestId("replica-job").first().waitFor();
    for (const id of ["scale-button", "version-button", `archive-${params.name}`])
      check((await viewer.getByTestId(id).count()) === 0, `a viewer sees ${id}`);
    await visit(viewer, "deployment-viewer", "en");
    await viewer.getByRole("tab", { name: "Keys" }).click();
    await viewer.getByText("e2e", { exact: true }).waitFor();
    check((await viewer.getByTestId("key-create").count()) === 0, "a viewer sees New key");
    check((await viewer.getByRole("button", { name: "Revoke" }).count()) === 0, "a viewer sees Revoke");
    await viewer.goto(`${base}/deployments/new`);
    await viewer.getByText("Your role in this tenant cannot deploy models.").waitFor();
    check((await viewer.getByTestId("deploy-submit").count()) === 0, "a viewer sees the deploy form");
    report.viewerOk = true;
  },

  // The tenant admin console, every section, and the catalogue pages, in both languages.
  async admin(browser) {
    const sections = [
      ["members", "Members", "成员"],
      ["invitations", "Invitations", "邀请"],
      ["projects", "Projects", "项目"],
      ["quotas", "Quotas", "配额"],
      ["tokens", "Access tokens", "访问令牌"],
      ["audit", "Audit log", "审计日志"],
      ["signatures", "Failure signatures", "故障特征"],
      ["webhooks", "Webhooks", "Webhook"],
      ["secrets", "Secrets", "项目机密"],
    ];
    for (const lang of ["en", "zh"]) {
      const page = await newPage(browser, lang);
      await signIn(page, params.users.admin);
      for (const [path, en, zh] of [["/datasets", "Datasets", "数据集"], ["/models", "Models", "模型"], ["/clusters", "Clusters", "集群"]]) {
        await page.goto(`${base}${path}`);
        await page.getByRole("heading", { name: lang === "en" ? en : zh, exact: true }).waitFor();
        await visit(page, path.slice(1), lang);
      }
      for (const [section, en, zh] of sections) {
        await page.goto(`${base}/console/${section}`);
        await page.getByRole("heading", { name: lang === "en" ? en : zh, exact: true }).waitFor();
        await visit(page, `admin-${section}`, lang);
      }
      await page.context().close();
    }
  },
};

const name = process.argv[2];
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let code = 0;
try {
  check(scenarios[name], `no scenario ${name}`);
  await scenarios[name](browser);
  check(!axeFailures.length, axeFailures.join("\n"));
  check(!report.consoleErrors.length, `errors in the browser console: ${report.consoleErrors.join(" | ")}`);
} catch (e) {
  console.error(`scenario ${name} failed: ${e.stack ?? e}`);
  let n = 0;
  for (const context of browser.contexts())
    for (const page of context.pages()) {
      console.error(`page ${n}: ${page.url()}: ${(await page.locator("body").innerText().catch(() => "")).slice(0, 1500)}`);
      if (shots) await page.screenshot({ path: `${shots}/FAILED-${name}-${n++}.png`, fullPage: true }).catch(() => {});
    }
  console.error(`report so far: ${JSON.stringify(report)}`);
  code = 1;
} finally {
  await browser.close();
}
if (!code) console.log(JSON.stringify(report));
process.exit(code);
