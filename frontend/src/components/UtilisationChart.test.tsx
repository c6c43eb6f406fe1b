import { describe, expect, it, vi } from "vitest";
import { fireEvent, screen, waitFor } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { renderAt } from "../test/render";
import { historyOption } from "./UtilisationChart";

// jsdom has no canvas: ECharts is drawn by the e2e run; here the chart is a labelled box
vi.mock("./Chart", () => ({
  Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} data-testid="chart" />,
}));

const HISTORY = {
  since: "2026-11-01T00:00:00Z",
  until: "2026-11-03T00:00:00Z",
  bucket: "day",
  group_by: "project",
  series: [
    {
      tenant: "acme",
      project: "vision",
      points: [
        { start: "2026-11-01T00:00:00Z", gpu_hours: 24, gpus: 1 },
        { start: "2026-11-02T00:00:00Z", gpu_hours: 48, gpus: 2 },
      ],
    },
    {
      tenant: "acme",
      project: "speech",
      points: [
        { start: "2026-11-01T00:00:00Z", gpu_hours: 0, gpus: 0 },
        { start: "2026-11-02T00:00:00Z", gpu_hours: 12, gpus: 0.5 },
      ],
    },
  ],
};
const page = (results: unknown[]) => ({ next: null, previous: null, results });

describe("utilisation chart", () => {
  it("stacks a series per group and draws the quota as a flat line", () => {
    const option = historyOption(HISTORY, "project", 4, "GPU quota") as {
      xAxis: { data: string[] };
      series: { name: string; stack?: string; data: number[] }[];
    };
    expect(option.xAxis.data).toHaveLength(2);
    expect(option.series.map((s) => [s.name, s.stack, s.data])).toEqual([
      ["vision", "gpus", [1, 2]],
      ["speech", "gpus", [0, 0.5]],
      ["GPU quota", undefined, [4, 4]],
    ]);
    expect((historyOption(HISTORY, "project", null, "q") as { series: unknown[] }).series).toHaveLength(2);
  });

  it("is in the quotas console: per project, then per user, for the chosen tenant", async () => {
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/quotas/": () => page([]),
      "GET /api/v1/usage/": () => ({ results: [], storage: [] }),
      "GET /api/v1/usage/history/": () => HISTORY,
    });
    renderAt("/console/quotas");
    expect(await screen.findByTestId("usage-total")).toHaveTextContent("84.0 GPU h");
    const history = () =>
      calls.filter((r) => new URL(r.url).pathname === "/api/v1/usage/history/").map((r) => new URL(r.url).searchParams);
    expect(history()[0].get("tenant")).toBe("t1");
    expect([history()[0].get("group_by"), history()[0].get("bucket")]).toEqual(["project", "day"]);
    fireEvent.click(screen.getByText("User"));
    await waitFor(() => expect(history().some((q) => q.get("group_by") === "user")).toBe(true));
    fireEvent.click(screen.getByText("7 days"));
    await waitFor(() => expect(history().some((q) => q.get("bucket") === "hour")).toBe(true));
  });

  it("says what to expect when the range holds no GPU time", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/quotas/": () => page([]),
      "GET /api/v1/usage/": () => ({ results: [], storage: [] }),
      "GET /api/v1/usage/history/": () => ({ ...HISTORY, series: [] }),
    });
    renderAt("/console/quotas");
    expect(await screen.findByText(/No GPU time in this range yet/)).toBeInTheDocument();
    expect(screen.queryByTestId("chart")).toBeNull();
  });
});
