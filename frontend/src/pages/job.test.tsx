import { describe, expect, it, vi } from "vitest";
import { act, screen, waitFor } from "@testing-library/react";
import { ME, fakeApi } from "../test/fakeApi";
import { fakeSockets } from "../test/fakeSocket";
import { renderAt } from "../test/render";

vi.mock("../components/Chart", () => ({
  Chart: ({ label }: { label: string }) => <div role="img" aria-label={label} data-testid="chart" />,
}));

const detail = {
  id: "j1",
  name: "train-a",
  kind: "training",
  project: "p1",
  project_slug: "vision",
  user: "ada",
  state: "SUCCEEDED",
  state_reason: "exit code 0",
  queue_position: null,
  priority: 0,
  labels: {},
  gpus: 0,
  cpus: 1,
  memory_mb: 1024,
  cluster: "local",
  partition: "cpu",
  restart_count: 0,
  cancel_requested: false,
  checkpoint_dir: "",
  latest_checkpoint: "",
  exit_code: 0,
  created_at: "2026-01-01T00:00:00Z",
  admitted_at: null,
  started_at: null,
  finished_at: null,
  signatures: [],
  attempts: [],
  events: [],
  spec: {},
};
const line = (offset: number, message: string, stream = "stdout") => ({
  attempt_number: 1,
  stream,
  offset,
  timestamp: null,
  level: null,
  message,
});

describe("job page log", () => {
  it("keeps a backlog that arrives before the job's details, and draws it once they come", async () => {
    const sockets = fakeSockets();
    let release: (value: unknown) => void = () => {};
    const held = new Promise((resolve) => (release = resolve));
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/jobs/j1/": () => held.then(() => detail),
      "GET /api/v1/jobs/j1/metrics/": () => ({ series: {} }),
      "GET /api/v1/projects/p1/": () => ({ id: "p1", tenant_id: "t1", slug: "vision", name: "Vision" }),
    });
    renderAt("/jobs/j1");
    await waitFor(() => expect(sockets.length).toBe(1));
    expect(new URL(sockets[0].url).pathname).toBe("/ws/jobs/j1/");
    // the socket answers first: a finished job's whole log, in its backlog
    act(() =>
      sockets[0].push({
        type: "backlog",
        state: "SUCCEEDED",
        reason: "exit code 0",
        streams: { attempt: 1, stdout: true, stderr: true },
        lines: [line(0, "first words"), line(12, "last words"), line(0, "a warning", "stderr")],
      }),
    );
    expect(screen.queryByTestId("log-view")).toBeNull(); // the job's details are still loading
    await act(async () => release(null));
    await waitFor(() => expect(screen.getByTestId("log-count")).toHaveTextContent("3 lines"));
    expect(screen.getByTestId("log-view")).toHaveTextContent("first words");
    expect(screen.getByTestId("log-view")).toHaveTextContent("a warning");
    expect(screen.queryByText("No log lines yet.")).toBeNull();
    // live lines add to it; a new backlog (a reconnect) replaces it
    act(() => sockets[0].push({ type: "lines", lines: [line(23, "one more")] }));
    await waitFor(() => expect(screen.getByTestId("log-count")).toHaveTextContent("4 lines"));
    act(() =>
      sockets[0].push({ type: "backlog", state: "SUCCEEDED", reason: "", streams: {}, lines: [line(0, "again")] }),
    );
    await waitFor(() => expect(screen.getByTestId("log-count")).toHaveTextContent("1 lines"));
  });
});
