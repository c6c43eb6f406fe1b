import { describe, expect, it, vi } from "vitest";
import { act, fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { fakeSockets } from "../test/fakeSocket";
import { renderAt } from "../test/render";

// jsdom has no canvas (the home page draws a chart); the e2e run draws it
vi.mock("../components/Chart", () => ({
  Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} data-testid="chart" />,
}));

const job = (id: string, name: string, state: string, signatures: string[] = [], cluster = "local") => ({
  id,
  name,
  kind: "training",
  project: "p1",
  project_slug: "vision",
  user: "ada",
  state,
  state_reason: "",
  queue_position: null,
  expected_start: null as unknown,
  priority: 0,
  labels: {},
  gpus: 1,
  cpus: 1,
  memory_mb: 1024,
  cluster,
  partition: "gpu",
  restart_count: 0,
  cancel_requested: false,
  checkpoint_dir: "",
  latest_checkpoint: "",
  exit_code: null,
  created_at: "2026-01-01T00:00:00Z",
  admitted_at: null,
  started_at: null,
  finished_at: null,
  signatures,
});
const page = (results: unknown[]) => ({ next: null, previous: null, results });

function routes(jobs: () => unknown[]) {
  return {
    "GET /api/v1/auth/me": () => ME("member"),
    "GET /api/v1/projects/": () => PROJECTS,
    "GET /api/v1/failure-signatures/": () => page([]),
    "GET /api/v1/jobs/": () => page(jobs()),
  };
}

const listCalls = (calls: Request[]) => calls.filter((r) => new URL(r.url).pathname === "/api/v1/jobs/");

describe("jobs list", () => {
  it("tags each job with its failure signatures; a tag filters the list by it", async () => {
    fakeSockets();
    const { calls } = fakeApi(
      routes(() => [job("j1", "train-a", "FAILED", ["nccl", "oom"]), job("j2", "train-b", "SUCCEEDED", [], "local-k8s")]),
    );
    renderAt("/jobs");
    const row = (await screen.findByText("train-a")).closest("tr")!;
    const tags = within(row).getAllByTestId("job-signature");
    expect(tags.map((t) => t.textContent)).toEqual(["nccl", "oom"]);
    expect(within(screen.getByText("train-b").closest("tr")!).queryByTestId("job-signature")).toBeNull();
    expect(within(screen.getByText("train-b").closest("tr")!).getByText("local-k8s")).toBeInTheDocument();
    fireEvent.click(tags[1]);
    await waitFor(() =>
      expect(listCalls(calls).some((r) => new URL(r.url).searchParams.get("signature") === "oom")).toBe(true),
    );
  });

  it("follows the tenant's jobs over one socket: a change shows at once, then the page is fetched again", async () => {
    const sockets = fakeSockets();
    let state = "QUEUED";
    const { calls } = fakeApi(routes(() => [job("j1", "train-a", state), job("j2", "train-b", "RUNNING")]));
    renderAt("/jobs");
    const row = (await screen.findByText("train-a")).closest("tr")!;
    expect(within(row).getByTestId("job-state")).toHaveTextContent("QUEUED");
    await waitFor(() => expect(sockets.length).toBe(1)); // one socket for the page, not one per row
    expect(new URL(sockets[0].url).pathname).toBe("/ws/tenants/t1/jobs/");
    const before = listCalls(calls).length;
    act(() => sockets[0].push({ type: "subscribed", tenant: "t1", project: null }));
    state = "RUNNING";
    act(() =>
      sockets[0].push({
        type: "states",
        changes: [{ job: "j1", project: "p1", state: "RUNNING", from: "QUEUED", reason: "", at: "", attempt: 1 }],
      }),
    );
    expect(within(row).getByTestId("job-state")).toHaveTextContent("RUNNING"); // before any fetch
    await waitFor(() => expect(listCalls(calls).length).toBe(before + 1), { timeout: 5000 });
  });

  it("says when a waiting job is expected to start, and why one cannot", async () => {
    fakeSockets();
    const soon = new Date(Date.now() + 12 * 60_000).toISOString();
    const waiting = { ...job("j1", "train-a", "PENDING"), expected_start: {
      p10: new Date(Date.now() + 5 * 60_000).toISOString(), p50: soon,
      p90: new Date(Date.now() + 30 * 60_000).toISOString(), computed_at: soon, basis: "", cannot_start: "" } };
    const blocked = { ...job("j2", "train-b", "PENDING"), expected_start: {
      p10: null, p50: null, p90: null, computed_at: soon, basis: "",
      cannot_start: "tenant acme allows 2 GPUs; this job needs 4" } };
    fakeApi(routes(() => [waiting, blocked, job("j3", "train-c", "RUNNING")]));
    renderAt("/jobs");
    const row = (name: string) => screen.findByText(name).then((n) => n.closest("tr")!);
    expect(within(await row("train-a")).getByTestId("job-starts")).toHaveTextContent("starts in ~12 min (5-30 min)");
    expect(within(await row("train-b")).getByTestId("job-starts")).toHaveTextContent(
      "cannot start: tenant acme allows 2 GPUs; this job needs 4",
    );
    expect(within(await row("train-c")).queryByTestId("job-starts")).toBeNull();
  });

  it("opens the socket for the chosen project only", async () => {
    localStorage.setItem("torus.project", "p1");
    const sockets = fakeSockets();
    fakeApi(routes(() => []));
    renderAt("/jobs");
    await waitFor(() => expect(sockets.length).toBe(1));
    expect(sockets[0].url).toMatch(/\/ws\/tenants\/t1\/jobs\/\?project=p1$/);
  });
});

describe("home page", () => {
  it("refreshes my active jobs when the tenant socket says a job changed, without polling", async () => {
    const sockets = fakeSockets();
    let state = "QUEUED";
    const { calls } = fakeApi({
      ...routes(() => [job("j1", "train-a", state)]),
      "GET /api/v1/quotas/": () => page([]),
      "GET /api/v1/usage/history/": () => ({ since: "", until: "", bucket: "day", group_by: "tenant", series: [] }),
    });
    renderAt("/");
    expect(await screen.findByText("train-a")).toBeInTheDocument();
    await waitFor(() => expect(sockets.length).toBe(1));
    expect(new URL(sockets[0].url).pathname).toBe("/ws/tenants/t1/jobs/");
    const before = listCalls(calls).length;
    state = "RUNNING";
    act(() =>
      sockets[0].push({
        type: "states",
        changes: [{ job: "j1", project: "p1", state: "RUNNING", from: "QUEUED", reason: "", at: "", attempt: 1 }],
      }),
    );
    await waitFor(() => expect(listCalls(calls).length).toBe(before + 1), { timeout: 5000 });
    expect(await screen.findByText("RUNNING")).toBeInTheDocument();
  });
});
