import { describe, expect, it } from "vitest";
import { act, fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { FakeSocket, fakeSockets } from "../test/fakeSocket";
import { renderAt } from "../test/render";

const item = (over: Record<string, string>) => ({
  event: "failed",
  event_id: "e1",
  job: "j1",
  name: "train-a",
  project: "vision",
  state: "FAILED",
  reason: "exit code 3",
  at: "2026-12-07T10:00:00+00:00",
  tenant: "t1",
  ...over,
});

describe("the bell", () => {
  it("counts the inbox's and live events not seen yet, lists them, and forgets the count once opened", async () => {
    localStorage.clear();
    fakeSockets();
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/subscriptions/inbox/": () => ({
        items: [item({}), item({ event_id: "e0", tenant: "t2", name: "elsewhere" })], // t2: another tenant's
      }),
    });
    renderAt("/console/projects");
    await waitFor(() => expect(screen.getByTestId("bell-count")).toHaveTextContent("1"));
    await waitFor(() => expect(FakeSocket.bell.length).toBe(1));
    expect(new URL(FakeSocket.bell[0].url).pathname).toBe("/ws/notifications/");
    act(() =>
      FakeSocket.bell[0].push({
        type: "items",
        items: [item({ event: "stalled", event_id: "e2", name: "train-b", reason: "no output line", at: "2026-12-07T11:00:00+00:00" })],
      }),
    );
    await waitFor(() => expect(screen.getByTestId("bell-count")).toHaveTextContent("2"));
    fireEvent.click(screen.getByTestId("bell"));
    const rows = await screen.findAllByTestId("bell-item");
    expect(rows.map((r) => r.textContent)).toEqual([
      expect.stringContaining("train-b has stalled"),
      expect.stringContaining("train-a failed"),
    ]);
    expect(within(rows[1]).getByRole("link", { name: "train-a" })).toHaveAttribute("href", "/jobs/j1");
    expect(screen.queryByText("elsewhere")).toBeNull();
    await waitFor(() => expect(screen.getByTestId("bell-count")).not.toHaveTextContent(/\d/));
  });
});
