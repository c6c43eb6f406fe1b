import { describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { renderAt } from "../test/render";
import { usageOptions } from "./deployments/UsageCharts";
import { eventFigures } from "./deployments/Events";
import { DEPLOY_DEFAULTS, toBody } from "./deployments/Deploy";
import type { Usage } from "./deployments/types";

// jsdom has no canvas: ECharts is drawn by the e2e run; here the chart is a labelled box
vi.mock("../components/Chart", () => ({
  Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} data-testid="chart" />,
}));

const page = (results: unknown[]) => ({ next: null, previous: null, results });

const deployment = (over: Record<string, unknown> = {}) => ({
  id: "d1",
  tenant: "t1",
  project: "p1",
  project_slug: "vision",
  name: "tiny",
  model: "m1",
  model_name: "tiny",
  ref: "tiny@production",
  follow_alias: "production",
  version: { id: "v1", number: 3 },
  runtime: "llama.cpp",
  state: "READY",
  state_reason: "",
  replicas: { desired: 2, min: 1, max: 4, ready: 2, live: 2 },
  resources: { cpus: 2, memory_mb: 1024, gpus: 0, gpu_type: null, accelerator: "gpu", partition: null },
  slots: 4,
  context: 2048,
  kv_cache_type: "f16",
  autoscale_target: 1,
  scale_to_zero_after_s: null,
  limits: { tokens_per_minute: null, max_request_bytes: 1048576, max_tokens: 4096 },
  gateway: "/serve/d1/v1",
  last_request_at: null,
  created_by: "ada",
  created_at: "2026-01-01T00:00:00Z",
  updated_at: "2026-01-01T00:00:00Z",
  ...over,
});

const usage = (requests: number): Usage => ({
  deployment: "d1",
  minutes: 5,
  step_s: 60,
  series: [0, 1, 2].map((i) => ({
    t: `2026-01-01T00:0${i}:00+00:00`,
    requests: i === 2 ? requests : 0,
    errors: 0,
    requests_per_s: i === 2 ? requests / 60 : 0,
    latency_p50_ms: i === 2 ? 12 : null,
    latency_p95_ms: i === 2 ? 40 : null,
    ttft_p50_ms: i === 2 ? 5 : null,
    ttft_p95_ms: i === 2 ? 9 : null,
    tokens_in_per_min: i === 2 ? 30 : 0,
    tokens_out_per_min: i === 2 ? 90 : 0,
  })),
  totals: {
    requests,
    errors: 0,
    requests_per_s: requests / 300,
    latency_p50_ms: requests ? 12 : null,
    latency_p95_ms: requests ? 40 : null,
    tokens_in: 30,
    tokens_out: 90,
  },
});

const REPLICA = {
  id: "r1aaaaaa-0000-0000-0000-000000000000",
  state: "READY",
  state_reason: "",
  version: 3,
  job: "j1",
  job_state: "RUNNING",
  host: "127.0.0.1",
  port: 41000,
  ready_at: "2026-01-01T00:00:05Z",
  last_ok_at: "2026-01-01T00:01:00Z",
  failures: 0,
  created_at: "2026-01-01T00:00:00Z",
  stopped_at: null,
};
const AUTOSCALE = {
  id: "e2",
  kind: "scaled_up",
  message: "1 -> 2 replica(s): 7 processing + 3 waiting on 1 replica(s) of 4 slots, target 1 per slot",
  data: {
    from: 1,
    to: 2,
    by: "autoscale",
    requests_processing: 7,
    requests_deferred: 3,
    ready_replicas: 1,
    slots_per_replica: 4,
    target_per_slot: 1,
    per_replica: { r1: { processing: 7, deferred: 3 } },
  },
  created_at: "2026-01-01T00:02:00Z",
};
const KEY = { id: "k1", name: "ci", prefix: "tsk_ab12", created_by: "ada", revoked_at: null, created_at: "2026-01-01T00:00:00Z" };

function detailRoutes(role: string, extra: Record<string, (r: Request) => unknown> = {}) {
  return {
    "GET /api/v1/auth/me": () => ME(role),
    "GET /api/v1/projects/": () => PROJECTS,
    "GET /api/v1/deployments/d1/": () => deployment(),
    "GET /api/v1/deployments/d1/replicas/": () => page([REPLICA]),
    "GET /api/v1/deployments/d1/events/": () =>
      page([{ id: "e1", kind: "created", message: "tiny:3 with 1 replica(s)", data: {}, created_at: "2026-01-01T00:00:00Z" }, AUTOSCALE]),
    "GET /api/v1/deployments/d1/keys/": () => page([KEY]),
    "GET /api/v1/deployments/d1/usage/": () => usage(12),
    ...extra,
  };
}

async function choose(testId: string, title: string) {
  fireEvent.mouseDown(within(screen.getByTestId(testId)).getByRole("combobox"));
  fireEvent.click(await screen.findByTitle(title));
}

describe("deployments list", () => {
  it("shows each of the tenant's deployments: state, model@alias, replicas ready/desired, request rate", async () => {
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/deployments/": () =>
        page([
          deployment(),
          deployment({ id: "d2", name: "pinned", ref: "tiny:2", follow_alias: "", version: { id: "v0", number: 2 }, state: "DEGRADED", replicas: { desired: 3, min: 3, max: 3, ready: 1, live: 3 } }),
        ]),
      "GET /api/v1/deployments/d1/usage/": () => usage(60), // 60 in 5 minutes: 0.20/s
      "GET /api/v1/deployments/d2/usage/": () => usage(0),
    });
    renderAt("/deployments");
    const row = (await screen.findByRole("link", { name: "tiny" })).closest("tr")!;
    expect(within(row).getByTestId("deployment-state")).toHaveTextContent("READY");
    expect(within(row).getByText("tiny@production → v3")).toBeInTheDocument();
    expect(within(row).getByTestId("deployment-replicas")).toHaveTextContent("2 / 2");
    expect(await within(row).findByTestId("deployment-rate")).toHaveTextContent("0.20");
    const pinned = screen.getByRole("link", { name: "pinned" }).closest("tr")!;
    expect(within(pinned).getByText("tiny:2")).toBeInTheDocument();
    expect(within(pinned).getByTestId("deployment-replicas")).toHaveTextContent("1 / 3");
    const first = calls.find((r) => new URL(r.url).pathname === "/api/v1/deployments/")!;
    expect(new URL(first.url).searchParams.get("tenant")).toBe("t1"); // the chosen tenant's
    expect(screen.getByTestId("deploy-button")).toBeInTheDocument();
    expect(screen.getByRole("link", { name: "Deployments" })).toBeInTheDocument(); // the nav entry

    await choose("deployments-state-filter", "DEGRADED");
    await waitFor(() =>
      expect(
        calls.some((r) => new URL(r.url).pathname === "/api/v1/deployments/" && new URL(r.url).searchParams.get("state") === "DEGRADED"),
      ).toBe(true),
    );
  });

  it("says how to deploy when there is none; a viewer gets no Deploy button", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/deployments/": () => page([]),
    });
    renderAt("/deployments");
    expect(await screen.findByTestId("deployments-empty")).toHaveTextContent("torus deploy MODEL@ALIAS");
    expect(screen.getByTestId("deploy-button")).toBeInTheDocument();
  });

  it("shows a viewer no Deploy button, in Chinese", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("viewer"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/deployments/": () => page([]),
    });
    renderAt("/deployments", "zh");
    expect(await screen.findByRole("heading", { name: "模型部署" })).toBeInTheDocument();
    expect(await screen.findByTestId("deployments-empty")).toHaveTextContent("项目成员可以部署");
    expect(screen.queryByTestId("deploy-button")).toBeNull();
  });

  it("shows an error with a retry when the list fails", async () => {
    let fail = true;
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/deployments/": () => (fail ? json(500, { error: { code: "server_error", message: "boom" } }) : page([])),
    });
    renderAt("/deployments");
    expect(await screen.findByText("boom (server_error)")).toBeInTheDocument();
    fail = false;
    fireEvent.click(screen.getByRole("button", { name: "Retry" }));
    expect(await screen.findByTestId("deployments-empty")).toBeInTheDocument();
  });
});

describe("deployment page", () => {
  it("shows replicas with links to their jobs, autoscale decisions with their figures, and traffic charts", async () => {
    fakeApi(detailRoutes("member"));
    renderAt("/deployments/d1");
    expect(await screen.findByTestId("deployment-name")).toHaveTextContent("tiny");
    const job = await screen.findByTestId("replica-job");
    expect(job).toHaveAttribute("href", "/jobs/j1");
    expect(job).toHaveTextContent("RUNNING");
    expect(screen.getByTestId("replica-state")).toHaveTextContent("READY");
    expect(screen.getByText("127.0.0.1:41000")).toBeInTheDocument();

    fireEvent.click(screen.getByRole("tab", { name: "Events" }));
    const events = await screen.findAllByTestId("deployment-event");
    expect(events.map((e) => e.dataset.kind)).toEqual(["scaled_up", "created"]); // newest first
    const scaled = events[0];
    expect(scaled).toHaveTextContent("7 processing + 3 waiting");
    expect(scaled).toHaveTextContent("requests_processing 7");
    expect(scaled).toHaveTextContent("requests_deferred 3");
    expect(scaled).toHaveTextContent("target_per_slot 1");

    fireEvent.click(screen.getByRole("tab", { name: "Traffic" }));
    expect(await screen.findByRole("img", { name: "Request rate" })).toBeInTheDocument();
    expect(screen.getByRole("img", { name: "Latency p50 / p95" })).toBeInTheDocument();
    expect(screen.getByRole("img", { name: "Tokens per minute" })).toBeInTheDocument();
  });

  it("says so when there was no traffic", async () => {
    fakeApi(detailRoutes("member", { "GET /api/v1/deployments/d1/usage/": () => usage(0) }));
    renderAt("/deployments/d1");
    fireEvent.click(await screen.findByRole("tab", { name: "Traffic" }));
    expect(await screen.findByTestId("usage-empty")).toHaveTextContent("torus chat");
    expect(screen.queryByTestId("chart")).toBeNull();
  });

  it("lets a member scale, make a key shown once, and revoke one", async () => {
    let created = false;
    const { calls } = fakeApi(
      detailRoutes("member", {
        "PATCH /api/v1/deployments/d1/": () => deployment({ replicas: { desired: 3, min: 1, max: 4, ready: 2, live: 3 } }),
        "POST /api/v1/deployments/d1/keys/": () => {
          created = true;
          return json(201, { ...KEY, id: "k2", name: "bot", token: "tsk_secret_once" });
        },
        "DELETE /api/v1/deployments/d1/keys/k1/": () => new Response(null, { status: 204 }),
      }),
    );
    renderAt("/deployments/d1");
    fireEvent.click(await screen.findByTestId("scale-button"));
    const replicas = await screen.findByTestId("scale-replicas");
    fireEvent.change(replicas, { target: { value: "3" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(calls.some((r) => r.method === "PATCH")).toBe(true));
    const patch = calls.find((r) => r.method === "PATCH")!;
    expect(await patch.clone().json()).toMatchObject({ replicas: 3, replicas_min: 1, replicas_max: 4 });

    fireEvent.click(screen.getByRole("tab", { name: "Keys" }));
    fireEvent.click(await screen.findByTestId("key-create"));
    fireEvent.change(await screen.findByTestId("key-name"), { target: { value: "bot" } });
    fireEvent.click(screen.getAllByRole("button", { name: "Save" }).at(-1)!);
    expect(await screen.findByTestId("key-token")).toHaveTextContent("tsk_secret_once");
    expect(created).toBe(true);

    fireEvent.click(screen.getByRole("button", { name: "Revoke" }));
    fireEvent.click(await screen.findByRole("button", { name: "OK" })); // the confirmation
    await waitFor(() => expect(calls.some((r) => r.method === "DELETE" && r.url.endsWith("/keys/k1/"))).toBe(true));
  });

  it("moves a member's deployment to another version of its model, and archives it", async () => {
    let archived = false;
    const { calls } = fakeApi(
      detailRoutes("member", {
        "GET /api/v1/models/m1/": () => ({ id: "m1", name: "tiny", aliases: { production: 3, canary: 4 } }),
        "GET /api/v1/models/m1/versions/": () =>
          page([
            { id: "v4", number: 4, state: "ready", aliases: ["canary"] },
            { id: "v3", number: 3, state: "ready", aliases: ["production"] },
            { id: "v5", number: 5, state: "open", aliases: [] },
          ]),
        "PATCH /api/v1/deployments/d1/": () => deployment({ ref: "tiny:4" }),
        "POST /api/v1/deployments/d1/archive/": () => {
          archived = true;
          return deployment({ archived_at: "2026-03-01T10:00:00Z", state: "STOPPED" });
        },
        "GET /api/v1/deployments/": () => page([]),
      }),
    );
    renderAt("/deployments/d1");
    fireEvent.click(await screen.findByTestId("version-button"));
    const dialog = await screen.findByRole("dialog");
    fireEvent.mouseDown(within(dialog).getByRole("combobox"));
    expect(await screen.findByTitle("@canary (v4)")).toBeInTheDocument();
    expect(screen.queryByTitle("v5")).toBeNull(); // an open version cannot be served
    fireEvent.click(await screen.findByTitle("v4 (canary)"));
    fireEvent.click(within(dialog).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(calls.some((r) => r.method === "PATCH")).toBe(true));
    expect(await calls.find((r) => r.method === "PATCH")!.clone().json()).toEqual({ model: "tiny:4" });

    // archived, not deleted: its name typed first
    fireEvent.click(screen.getByTestId("archive-tiny"));
    fireEvent.change(await screen.findByTestId("archive-name"), { target: { value: "tiny" } });
    fireEvent.click(screen.getByTestId("archive-confirm"));
    expect(await screen.findByTestId("deployments-empty")).toBeInTheDocument(); // back on the list
    expect(archived).toBe(true);
  });

  it("puts the API's refusal of a scale at its field", async () => {
    fakeApi(
      detailRoutes("member", {
        "PATCH /api/v1/deployments/d1/": () =>
          json(400, { error: { code: "invalid", message: "Invalid input.", fields: { replicas: ["Between replicas_min (1) and replicas_max (4)."] } } }),
      }),
    );
    renderAt("/deployments/d1");
    fireEvent.click(await screen.findByTestId("scale-button"));
    fireEvent.click(await screen.findByRole("button", { name: "Save" }));
    expect(await screen.findByText("Between replicas_min (1) and replicas_max (4).")).toBeInTheDocument();
  });

  it("shows a viewer no action they may not take", async () => {
    fakeApi(detailRoutes("viewer"));
    renderAt("/deployments/d1");
    await screen.findByTestId("replica-job");
    expect(screen.queryByTestId("scale-button")).toBeNull();
    expect(screen.queryByTestId("version-button")).toBeNull();
    expect(screen.queryByTestId("archive-tiny")).toBeNull();
    fireEvent.click(screen.getByRole("tab", { name: "Keys" }));
    await screen.findByText("ci");
    expect(screen.queryByTestId("key-create")).toBeNull();
    expect(screen.queryByRole("button", { name: "Revoke" })).toBeNull();
  });

  it("reads in Chinese", async () => {
    fakeApi(detailRoutes("member"));
    renderAt("/deployments/d1", "zh");
    expect(await screen.findByRole("tab", { name: "事件" })).toBeInTheDocument();
    expect(screen.getByRole("button", { name: "扩缩容" })).toBeInTheDocument();
  });
});

describe("deploy form", () => {
  const MODEL = { id: "m1", tenant_id: "t1", project: "p1", project_slug: "vision", name: "tiny", latest_version: 3, aliases: { production: 3 }, created_by: "ada", created_at: "", updated_at: "" };
  const VERSION = { id: "v3", number: 3, state: "ready", stage: "none", aliases: ["production"], framework: "gguf", file_count: 1 };
  const formRoutes = (post: (body: Record<string, unknown>) => unknown) => ({
    "GET /api/v1/auth/me": () => ME("member"),
    "GET /api/v1/projects/": () => PROJECTS,
    "GET /api/v1/models/": () => page([MODEL]),
    "GET /api/v1/models/m1/versions/": () => page([VERSION]),
    "POST /api/v1/deployments/": async (r: Request) => post(await r.json()),
  });

  it("shows the fit estimate (a dry run) before deploying, then deploys", async () => {
    const bodies: Record<string, unknown>[] = [];
    fakeApi({
      ...formRoutes((body) => {
        bodies.push(body);
        if (body.dry_run)
          return { fit: { fits: true, reason: "Fits in 1024 MiB of host memory.", tensor_parallel: 1, per_device_bytes: 160 * 2 ** 20, breakdown: { weights: 39 * 2 ** 20, kv_cache: 32 * 2 ** 20 } } };
        return json(201, deployment({ id: "d7" }));
      }),
      "GET /api/v1/deployments/d7/": () => deployment({ id: "d7" }),
    });
    renderAt("/deployments/new");
    fireEvent.change(await screen.findByTestId("deploy-name"), { target: { value: "tiny" } });
    await choose("deploy-project", "vision");
    await choose("deploy-model", "tiny");
    await choose("deploy-ref", "@production → v3");
    const fit = await screen.findByTestId("fit-result", {}, { timeout: 5000 });
    expect(fit).toHaveAttribute("data-fits", "true");
    expect(fit).toHaveTextContent("Fits in 1024 MiB of host memory.");
    expect(screen.getByTestId("fit-card")).toHaveTextContent("160.0 MiB");
    expect(screen.getByTestId("fit-card")).toHaveTextContent("kv_cache");
    expect(bodies.every((b) => b.dry_run === true)).toBe(true); // nothing written yet
    expect(bodies.at(-1)).toMatchObject({ project: "p1", model: "tiny@production", replicas: 1, memory: "1G", kv_cache_type: "f16" });

    fireEvent.click(screen.getByTestId("deploy-submit"));
    expect(await screen.findByTestId("deployment-name")).toHaveTextContent("tiny");
    expect(bodies.at(-1)!.dry_run).toBeUndefined();
  });

  it("shows a refusal to fit at the field before submitting, and the deploy's 400s at theirs", async () => {
    fakeApi(
      formRoutes((body) =>
        body.dry_run
          ? json(400, { error: { code: "invalid", message: "Invalid input.", fields: { memory: ["Needs 2.1 GiB of host memory; 1024 MiB asked for."] } } })
          : json(400, { error: { code: "invalid", message: "Invalid input.", fields: { name: ["A deployment named 'tiny' exists in this project."] } } }),
      ),
    );
    renderAt("/deployments/new");
    fireEvent.change(await screen.findByTestId("deploy-name"), { target: { value: "tiny" } });
    await choose("deploy-project", "vision");
    await choose("deploy-model", "tiny");
    await choose("deploy-ref", "v3 (gguf)");
    const fit = await screen.findByTestId("fit-result", {}, { timeout: 5000 });
    expect(fit).toHaveAttribute("data-fits", "false");
    expect(fit).toHaveTextContent("Needs 2.1 GiB");
    fireEvent.click(screen.getByTestId("deploy-submit"));
    expect(await screen.findByText("A deployment named 'tiny' exists in this project.")).toBeInTheDocument();
  });

  it("refuses a viewer", async () => {
    fakeApi({ ...formRoutes(() => ({})), "GET /api/v1/auth/me": () => ME("viewer") });
    renderAt("/deployments/new");
    expect(await screen.findByText("Your role in this tenant cannot deploy models.")).toBeInTheDocument();
    expect(screen.queryByTestId("deploy-form")).toBeNull();
  });
});

describe("pure parts", () => {
  it("leaves empty optional fields out of the body and sends scale to zero only when on", () => {
    const body = toBody({ ...DEPLOY_DEFAULTS, project: "p1", name: "x", model: "m:1", replicas_max: null, max_tokens: 256 });
    expect(body).toMatchObject({ project: "p1", name: "x", model: "m:1", max_tokens: 256 });
    expect("replicas_max" in body).toBe(false);
    expect("scale_to_zero_after_s" in body).toBe(false);
    expect(toBody({ ...DEPLOY_DEFAULTS, scale_to_zero: true, scale_to_zero_after_s: 120 }).scale_to_zero_after_s).toBe(120);
  });

  it("charts the usage buckets: rate, p50/p95, tokens in and out", () => {
    const o = usageOptions(usage(12), { rate: "rate", errors: "errors", ttft: "ttft", tokensIn: "in", tokensOut: "out" });
    const data = (opt: unknown, i: number) => (opt as { series: { data: unknown[] }[] }).series[i].data;
    expect(data(o.rate, 0)).toEqual([0, 0, 0.2]);
    expect(data(o.latency, 0)).toEqual([null, null, 12]);
    expect(data(o.latency, 1)).toEqual([null, null, 40]);
    // a lone minute with requests is drawn as a point, even between axis labels
    expect((o.latency as { series: { showAllSymbol?: boolean }[] }).series.every((x) => x.showAllSymbol)).toBe(true);
    expect(data(o.tokens, 0)).toEqual([0, 0, 30]);
    expect(data(o.tokens, 1)).toEqual([0, 0, 90]);
  });

  it("orders an autoscale event's figures as people read them", () => {
    expect(eventFigures(AUTOSCALE.data).slice(0, 4).map(([k]) => k)).toEqual(["from", "to", "by", "requests_processing"]);
    expect(eventFigures(null)).toEqual([]);
  });
});
