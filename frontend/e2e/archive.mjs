// Archive and restore a project in the admin console (tests/e2e/test_archive_ui.py): an admin
// opens the Archive dialog, whose Archive button stays disabled until the project's slug is
// typed exactly, archives it, finds it under "Show archived" with its badge and restores it;
// the dialog in English and Chinese passes axe; a member sees no Archive button. Started like
// run.mjs:
//   TORUS_E2E_PARAMS       JSON: {base, project (slug), users: {admin, member}}
//   CHROMIUM_PATH          the browser
//   TORUS_E2E_SCREENSHOTS  where the screenshots go (git ignores it)
// Prints one JSON line (what it saw) and exits 0, or prints the failure and exits 1.
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const AXE = require.resolve("axe-core/axe.min.js");
const params = JSON.parse(process.env.TORUS_E2E_PARAMS ?? "{}");
const shots = process.env.TORUS_E2E_SCREENSHOTS;
const { base, project: slug, users } = params;
const report = { axe: {}, consoleErrors: [] };

function check(cond, message) {
  if (!cond) throw new Error(message);
}

async function newPage(browser, lang) {
  const context = await browser.newContext({ viewport: { width: 1366, height: 900 }, locale: lang === "zh" ? "zh-CN" : "en-US" });
  await context.addInitScript((l) => localStorage.setItem("torus.lang", l), lang);
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (e) => report.consoleErrors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
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

/** axe-core on the page as it rests: no serious or critical violation. */
async function axe(page, name) {
  await page.mouse.move(0, 0);
  await page.waitForTimeout(400); // antd's open animation and hover colours settle
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  report.axe[name] = found.map((v) => `${v.impact}:${v.id}`);
  const bad = found.filter((v) => v.impact === "serious" || v.impact === "critical");
  check(!bad.length, `axe on ${name}: ${JSON.stringify(bad)}`);
  if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
}

/** What the API lists now (the page's own session): live and archived slugs. */
async function listed(page) {
  return page.evaluate(async () => {
    const slugs = async (q) => (await (await fetch(`/api/v1/projects/?page_size=500${q}`)).json()).results.map((p) => p.slug);
    return { live: await slugs(""), archived: await slugs("&archived=true") };
  });
}

const rows = (page) => page.locator("tr.ant-table-row");

async function run(browser) {
  // the dialog in Chinese: its words and axe; cancelled, nothing archived
  const zh = await newPage(browser, "zh");
  await signIn(zh, users.admin);
  await zh.goto(`${base}/console/projects`);
  await zh.getByTestId(`archive-${slug}`).click();
  const zhDialog = zh.getByRole("dialog");
  await zhDialog.getByText(`归档 ${slug}？`).waitFor();
  await zhDialog.getByLabel(`输入 ${slug} 以确认`).waitFor();
  await axe(zh, "archive-dialog.zh");
  await zh.keyboard.press("Escape");
  await zhDialog.waitFor({ state: "hidden" });
  await zh.context().close();

  const page = await newPage(browser, "en");
  await signIn(page, users.admin);
  await page.goto(`${base}/console/projects`);
  await rows(page).filter({ hasText: slug }).waitFor();
  check((await page.getByRole("button", { name: "Delete" }).count()) === 0, "a project still has Delete");
  await page.getByTestId(`archive-${slug}`).click();
  const dialog = page.getByRole("dialog");
  await dialog.getByText(`Archive ${slug}?`).waitFor();
  const ok = page.getByTestId("archive-confirm");
  const field = dialog.getByLabel(`Type ${slug} to confirm`);
  report.disabledEmpty = await ok.isDisabled();
  await field.fill(slug.toUpperCase());
  report.disabledWrong = await ok.isDisabled();
  await field.fill(slug.slice(0, -1));
  report.disabledPrefix = await ok.isDisabled();
  report.beforeArchive = await listed(page); // nothing was sent yet
  await field.fill(slug);
  report.enabledTyped = await ok.isEnabled();
  await axe(page, "archive-dialog.en");
  await ok.click();
  await dialog.waitFor({ state: "hidden" });
  await rows(page).filter({ hasText: slug }).waitFor({ state: "detached" });
  report.afterArchive = await listed(page);

  // Show archived: the row with its badge and, for an admin, Restore
  await page.getByRole("switch", { name: "Show archived" }).click();
  const row = rows(page).filter({ hasText: slug });
  await row.getByTestId("archived-tag").waitFor();
  report.badge = await row.getByTestId("archived-tag").innerText();
  await axe(page, "projects-archived.en");

  // a member: the archived row, no Restore; the live list, no Archive
  const member = await newPage(browser, "en");
  await signIn(member, users.member);
  await member.goto(`${base}/console/projects`);
  await member.getByRole("switch", { name: "Show archived" }).click();
  await rows(member).filter({ hasText: slug }).getByTestId("archived-tag").waitFor();
  report.memberRestore = await member.getByTestId(`restore-${slug}`).count();
  await member.context().close();

  await row.getByTestId(`restore-${slug}`).click();
  await page.getByText("Nothing archived here.").waitFor();
  report.afterRestore = await listed(page);
  await page.getByRole("switch", { name: "Show archived" }).click();
  await rows(page).filter({ hasText: slug }).getByTestId(`archive-${slug}`).waitFor();
  report.archiveAgainShown = true;
  await page.context().close();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
let code = 0;
try {
  await run(browser);
  check(!report.consoleErrors.length, `errors in the browser console: ${report.consoleErrors.join(" | ")}`);
} catch (e) {
  console.error(`archive scenario failed: ${e.stack ?? e}`);
  for (const context of browser.contexts())
    for (const [n, page] of context.pages().entries()) {
      console.error(`page ${n}: ${page.url()}: ${(await page.locator("body").innerText().catch(() => "")).slice(0, 1500)}`);
      if (shots) await page.screenshot({ path: `${shots}/FAILED-archive-${n}.png`, fullPage: true }).catch(() => {});
    }
  console.error(`report so far: ${JSON.stringify(report)}`);
  code = 1;
} finally {
  await browser.close();
}
if (!code) console.log(JSON.stringify(report));
process.exit(code);
