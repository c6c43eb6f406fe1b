import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor } from "@testing-library/react";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { renderAt } from "../test/render";

const HOOK = {
  id: "w1",
  tenant_id: "t1",
  url: "https://ci.example.org/hook",
  events: ["alias.changed"],
  description: "deploy",
  active: true,
  created_at: "2026-01-01T00:00:00Z",
  updated_at: "2026-01-01T00:00:00Z",
};
const DELIVERY = {
  id: "x1",
  event: "alias.changed",
  payload: {},
  state: "failed",
  attempts: 3,
  response_code: 502,
  error: "bad gateway",
  created_at: "2026-01-01T00:00:00Z",
};
const page = (results: unknown[]) => ({ next: null, previous: null, results });


describe("webhooks console", () => {
  it("lists webhooks with their delivery log and shows a new one's secret once", async () => {
    let hooks = [HOOK];
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/webhooks/": () => page(hooks),
      "GET /api/v1/webhooks/w1/deliveries/": () => page([DELIVERY]),
      "POST /api/v1/webhooks/": () => {
        hooks = [...hooks, { ...HOOK, id: "w2", url: "https://new.example.org/" }];
        return { ...hooks[1], secret: "s3cr3t-once" };
      },
    });
    renderAt("/console/webhooks");
    expect(await screen.findByText("https://ci.example.org/hook")).toBeInTheDocument();
    fireEvent.click(screen.getByRole("button", { name: /expand row/i }));
    expect(await screen.findByText("bad gateway")).toBeInTheDocument();
    expect(screen.getByText("502")).toBeInTheDocument();

    fireEvent.click(screen.getByTestId("webhook-create"));
    fireEvent.change(await screen.findByTestId("webhook-url"), { target: { value: "https://new.example.org/" } });
    fireEvent.click(screen.getByRole("button", { name: /save/i }));
    expect(await screen.findByText("s3cr3t-once")).toBeInTheDocument();
    expect(await screen.findByText("https://new.example.org/")).toBeInTheDocument();
    const post = calls.find((r) => r.method === "POST")!;
    expect(await post.clone().json()).toMatchObject({
      tenant: "t1",
      url: "https://new.example.org/",
      events: ["model_version.created", "alias.changed"],
    });
  });

  it("is not offered to a member, in Chinese", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/jobs/": () => page([]),
      "GET /api/v1/failure-signatures/": () => page([]),
    });
    renderAt("/jobs", "zh");
    await waitFor(() => expect(screen.getAllByText("提交作业").length).toBeGreaterThan(0));
    expect(screen.queryByText("Webhook")).toBeNull();
  });

  it("deletes a webhook after asking", async () => {
    let hooks = [HOOK];
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/webhooks/": () => page(hooks),
      "DELETE /api/v1/webhooks/w1/": () => {
        hooks = [];
        return {};
      },
    });
    renderAt("/console/webhooks");
    expect(await screen.findByText("https://ci.example.org/hook")).toBeInTheDocument();
    fireEvent.click(screen.getByRole("button", { name: "Delete" }));
    fireEvent.click(await screen.findByRole("button", { name: "OK" }));
    await waitFor(() => expect(screen.queryByText("https://ci.example.org/hook")).toBeNull());
    const gone = calls.find((r) => r.method === "DELETE")!;
    expect(new URL(gone.url).pathname).toBe("/api/v1/webhooks/w1/");
  });
});
