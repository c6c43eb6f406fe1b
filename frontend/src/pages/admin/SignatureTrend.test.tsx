import { describe, expect, it, vi } from "vitest";
import { screen, waitFor } from "@testing-library/react";
import dayjs from "dayjs";
import { ME, PROJECTS, fakeApi } from "../../test/fakeApi";
import { renderAt } from "../../test/render";
import { WEEKS, trendOption, weekBounds } from "./SignatureTrend";

vi.mock("../../components/Chart", () => ({
  Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} data-testid="chart" />,
}));
const page = (results: unknown[]) => ({ next: null, previous: null, results });

describe("failure signatures over time", () => {
  it("asks for 8 whole weeks, Monday to Monday, the last one this week", () => {
    const bounds = weekBounds(dayjs("2026-12-03T15:00:00")); // a Thursday
    expect(bounds).toHaveLength(WEEKS + 1);
    expect(bounds.at(-2)!.format("YYYY-MM-DD HH:mm")).toBe("2026-11-30 00:00");
    expect(bounds[0].format("YYYY-MM-DD")).toBe("2026-10-12");
    expect(bounds.every((b) => b.day() === 1)).toBe(true);
  });

  it("stacks each signature's jobs per week, zero where it matched none", () => {
    const option = trendOption(
      ["w1", "w2"],
      [[{ id: "1", name: "oom", jobs: 3, attempts: 4 }], [{ id: "2", name: "nccl", jobs: 1, attempts: 1 }]],
      ["oom", "nccl"],
    ) as { series: { name: string; data: number[] }[] };
    expect(option.series.map((s) => [s.name, s.data])).toEqual([
      ["oom", [3, 0]],
      ["nccl", [0, 1]],
    ]);
  });

  it("is drawn in the console from one stats request a week", async () => {
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/failure-signatures/": () => page([{ id: "1", tenant_id: "t1", name: "oom", query: "OOM" }]),
      "GET /api/v1/failure-signatures/stats/": () => page([{ id: "1", name: "oom", jobs: 2, attempts: 2 }]),
    });
    renderAt("/console/signatures");
    expect(await screen.findByRole("img", { name: "Jobs matched per week, the last 8 weeks" })).toBeInTheDocument();
    await waitFor(() => {
      const weekly = calls.filter((r) => new URL(r.url).searchParams.has("since"));
      expect(weekly).toHaveLength(WEEKS);
    });
  });
});
