import { describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { lineageGraph, type Lineage } from "../lineage";
import { renderAt } from "../test/render";

// jsdom has no canvas: ECharts is drawn by the e2e run; here the chart is a labelled box
vi.mock("../components/Chart", () => ({
  Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} data-testid="chart" />,
}));

const LINEAGE: Lineage = {
  version: { id: "v2", ref: "resnet:2", number: 2 },
  job: { id: "j1", name: "train" },
  attempt: "a2",
  attempts: [
    { id: "a1", number: 1, source: false, dataset_versions: ["dv1"] },
    { id: "a2", number: 2, source: true, dataset_versions: ["dv1"] },
  ],
  dataset_versions: [
    { id: "dv1", ref: "images:1" },
    { id: "dv9", ref: "labels:3" },
  ],
};
const MODEL = {
  id: "m1",
  tenant_id: "t1",
  project_slug: "vision",
  name: "resnet",
  latest_version: 2,
  aliases: { production: 1 },
  created_by: "ada",
  created_at: "2026-01-01T00:00:00Z",
};
const VERSION = { id: "v2", number: 2, state: "ready", stage: "none", aliases: [], framework: "torch", file_count: 1, source_job: "j1" };
const page = (results: unknown[]) => ({ next: null, previous: null, results });


const routes = (role: string) => ({
  "GET /api/v1/auth/me": () => ME(role),
  "GET /api/v1/projects/": () => PROJECTS,
  "GET /api/v1/models/": () => page([MODEL]),
  "GET /api/v1/models/m1/versions/": () => page([VERSION]),
  "GET /api/v1/models/m1/versions/2/lineage/": () => LINEAGE,
  "PUT /api/v1/models/m1/aliases/production/": () => ({ alias: "production", version: 2 }),
  "GET /api/v1/models/m1/alias-history/": () => [],
});

describe("model lineage", () => {
  it("links dataset versions to the attempts that read them and the source attempt to the model", () => {
    const g = lineageGraph(LINEAGE);
    expect(g.nodes.map((n) => n.name)).toEqual(["images:1", "labels:3", "train #1", "train #2 ★", "resnet:2"]);
    expect(g.links).toEqual([
      { source: "d:dv1", target: "a:a1" },
      { source: "d:dv1", target: "a:a2" },
      { source: "a:a2", target: "m:v2" },
      { source: "d:dv9", target: "m:v2" }, // named at registration only
    ]);
  });

  it("follows the version forward to the inference jobs that read it and what they wrote", () => {
    const g = lineageGraph({
      ...LINEAGE,
      inference_jobs: [
        { id: "j7", name: "score", output_dataset_versions: [{ id: "dv5", ref: "predictions:1" }] },
      ],
    });
    expect(g.nodes.slice(-2).map((n) => [n.name, n.category])).toEqual([
      ["score", 3],
      ["predictions:1", 0],
    ]);
    expect(g.links.slice(-2)).toEqual([
      { source: "m:v2", target: "i:j7" },
      { source: "i:j7", target: "o:dv5" },
    ]);
  });

  it("draws the lineage and moves an alias for a member", async () => {
    const { calls } = fakeApi(routes("member"));
    renderAt("/models");
    fireEvent.click(await screen.findByRole("button", { name: /expand row/i }));
    fireEvent.click(await screen.findByTestId("lineage-2"));
    expect(await screen.findByText("images:1 → train #2 ★")).toBeInTheDocument();
    expect(screen.getByText("train #2 ★ → resnet:2")).toBeInTheDocument();
    fireEvent.change(screen.getByTestId("alias-2"), { target: { value: "production" } });
    fireEvent.click(screen.getByTestId("alias-move-2"));
    await waitFor(() => expect(calls.some((r) => r.method === "PUT")).toBe(true));
    const put = calls.find((r) => r.method === "PUT")!;
    expect(new URL(put.url).pathname).toBe("/api/v1/models/m1/aliases/production/");
    expect(await put.clone().json()).toEqual({ version: 2 });
  });

  it("removes an alias for a member, after asking", async () => {
    const { calls } = fakeApi({
      ...routes("member"),
      "GET /api/v1/models/m1/versions/": () => page([{ ...VERSION, aliases: ["staging"] }]),
      "DELETE /api/v1/models/m1/aliases/staging/": () => ({}),
      "GET /api/v1/models/m1/alias-history/": () => [
        { alias: "staging", from_version: null, to_version: 1, actor: "ada", at: "2026-01-01T00:00:00Z" },
        { alias: "staging", from_version: 1, to_version: 2, actor: "bob", at: "2026-01-02T00:00:00Z" },
      ],
    });
    renderAt("/models");
    fireEvent.click(await screen.findByRole("button", { name: /expand row/i }));
    expect(await screen.findByText("Alias moves")).toBeInTheDocument(); // newest first
    const moves = screen.getAllByRole("row").map((r) => r.textContent ?? "").filter((r) => r.startsWith("staging"));
    expect(moves.map((r) => r.replace(/\d{4}-.*$/, ""))).toEqual(["stagingv1 → v2bob", "staging— → v1ada"]);
    fireEvent.click(await screen.findByRole("button", { name: "Remove this alias: staging" }));
    expect(calls.some((r) => r.method === "DELETE")).toBe(false); // not before the confirmation
    fireEvent.click(await screen.findByRole("button", { name: "OK" }));
    await waitFor(() => expect(calls.some((r) => r.method === "DELETE")).toBe(true));
    const gone = calls.find((r) => r.method === "DELETE")!;
    expect(new URL(gone.url).pathname).toBe("/api/v1/models/m1/aliases/staging/");
  });

  it("hides alias moves from a viewer, in Chinese", async () => {
    fakeApi(routes("viewer"));
    renderAt("/models", "zh");
    fireEvent.click(await screen.findByRole("button", { name: /展开行|expand row/i }));
    expect(await screen.findByTestId("lineage-2")).toBeInTheDocument();
    expect(screen.queryByTestId("alias-2")).toBeNull();
    expect(screen.queryByRole("button", { name: /删除此别名/ })).toBeNull();
    expect(screen.queryByText("将别名指向此版本")).toBeNull();
  });
});
