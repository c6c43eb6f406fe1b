import { describe, expect, it } from "vitest";
import { screen, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { renderAt } from "../test/render";

const page = (results: unknown[]) => ({ next: null, previous: null, results });
const CLUSTER = {
  id: "c1",
  name: "local",
  backend: "slurm",
  is_default: true,
  supports_containers: false,
  healthy: true,
  last_error: "",
  last_synced_at: null,
  last_reconciled_at: null,
  partitions: [],
};
const minutesAgo = (n: number) => new Date(Date.now() - n * 60_000).toISOString();
const BUILDS = [
  { name: "engine", state: "waiting", step: 0, steps: 2, step_name: "waiting", started: null, finished: null, cluster: null, error: "" },
  { name: "kubernetes", state: "building", step: 1, steps: 3, step_name: "build binaries", started: minutesAgo(4.5), finished: null, cluster: "local-k8s", error: "" },
];

function routes(builds: unknown[]) {
  return {
    "GET /api/v1/auth/me": () => ME("member"),
    "GET /api/v1/projects/": () => PROJECTS,
    "GET /api/v1/clusters/": () => page([CLUSTER]),
    "GET /api/v1/nodes/": () => page([]),
    "GET /api/v1/clusters/builds/": () => ({ results: builds }),
  };
}

describe("clusters page", () => {
  it("says above the clusters what is still being built and how far", async () => {
    fakeApi(routes(BUILDS));
    renderAt("/clusters");
    const notice = await screen.findByTestId("builds-notice");
    expect(within(notice).getByText("Still being built in the background (make up)")).toBeInTheDocument();
    expect(within(notice).getByText("kubernetes: building, step 1 of 3 (build binaries), 4 min so far")).toBeInTheDocument();
    expect(within(notice).getByText("engine: waiting for the builds before it")).toBeInTheDocument();
    expect(screen.getByText("local")).toBeInTheDocument();
  });

  it("says it in Chinese, and names a failed build", async () => {
    fakeApi(routes([{ ...BUILDS[1], state: "failed", step: 2, step_name: "start the control plane and nodes" }]));
    renderAt("/clusters", "zh");
    const notice = await screen.findByTestId("builds-notice");
    expect(within(notice).getByText("后台仍在构建（make up）")).toBeInTheDocument();
    expect(within(notice).getByText("kubernetes：第 2/3 步（start the control plane and nodes）失败")).toBeInTheDocument();
  });

  it("shows no notice when every build is done", async () => {
    fakeApi(routes([]));
    renderAt("/clusters");
    expect(await screen.findByText("local")).toBeInTheDocument();
    expect(screen.queryByTestId("builds-notice")).toBeNull();
  });
});
