import { describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { fakeSockets } from "../test/fakeSocket";
import { renderAt } from "../test/render";

// the chart's series, by its label, as the page hands them over
const drawn: Record<string, string[]> = {};
vi.mock("../components/Chart", () => ({
  Chart: ({ label, option }: { label: string; option: { series: { name: string }[] } }) => {
    drawn[label] = option.series.map((s) => s.name);
    return <div role="img" aria-label={label} data-testid="chart" />;
  },
}));

const page = (results: unknown[]) => ({ next: null, previous: null, results });

describe("usage samples and the idle policy", () => {
  it("draws a job's usage samples apart from its training metrics, over seconds", async () => {
    fakeSockets();
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/jobs/j1/": () => ({ id: "j1", name: "train", project: "p1", state: "RUNNING", attempts: [], events: [], spec: {}, labels: {} }),
      "GET /api/v1/projects/p1/": () => PROJECTS.results[0],
      "GET /api/v1/jobs/j1/metrics/": () => ({
        series: {
          loss: [{ step: 1, value: 0.5 }],
          "system/cpu_cores": [{ step: 30, value: 1.9 }],
          "system/memory_gib": [{ step: 30, value: 0.8 }],
        },
      }),
    });
    renderAt("/jobs/j1?tab=metrics");
    await screen.findByRole("img", { name: "Resources" });
    expect(drawn["Metrics"]).toEqual(["loss"]);
    expect(drawn["Resources"]).toEqual(["system/cpu_cores", "system/memory_gib"]);
  });

  it("lets a tenant admin set a project's idle policy", async () => {
    let project = { ...PROJECTS.results[0], idle_minutes: null as number | null, idle_grace_minutes: 15, archived_at: null };
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => page([project]),
      "PATCH /api/v1/projects/p1/": async (req: Request) => {
        project = { ...project, ...(await req.clone().json()) };
        return project;
      },
    });
    renderAt("/console/projects");
    const row = (await within(await screen.findByRole("table")).findByText("vision")).closest("tr")!;
    expect(row).toHaveTextContent("off");
    fireEvent.click(within(row).getByTestId("idle-policy-vision"));
    const dialog = await screen.findByRole("dialog");
    fireEvent.change(within(dialog).getByLabelText("Idle minutes"), { target: { value: "30" } });
    fireEvent.change(within(dialog).getByLabelText("Grace before cancelling (minutes)"), { target: { value: "10" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(project.idle_minutes).toBe(30));
    const patch = calls.find((r) => r.method === "PATCH")!;
    expect(await patch.clone().json()).toEqual({ idle_minutes: 30, idle_grace_minutes: 10 });
    await waitFor(() => expect(screen.getByRole("table")).toHaveTextContent("idle 30 min: told, cancelled 10 min later"));
  });

  it("shows a member the policy without the button", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => page([{ ...PROJECTS.results[0], idle_minutes: 60, idle_grace_minutes: 15, archived_at: null }]),
    });
    renderAt("/console/projects");
    await within(await screen.findByRole("table")).findByText("idle 60 min: told, cancelled 15 min later");
    expect(screen.queryByTestId("idle-policy-vision")).toBeNull();
  });
});
