import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, fakeApi } from "../../test/fakeApi";
import { renderAt } from "../../test/render";

const page = (results: unknown[]) => ({ next: null, previous: null, results });

describe("notification defaults", () => {
  it("lets an admin set the tenant's e-mail default, and a member only read it", async () => {
    const rows: Record<string, unknown>[] = [];
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/subscriptions/inbox/": () => ({ items: [] }),
      "GET /api/v1/notification-defaults/": () => page(rows),
      "POST /api/v1/notification-defaults/": async (req: Request) => {
        const body = await req.clone().json();
        rows.push({ id: "d1", tenant_id: "t1", channel: body.channel, events: body.events });
        return rows[0];
      },
    });
    renderAt("/console/notifications");
    await screen.findByText("No defaults: members are told only of what they subscribe to.");
    fireEvent.click(screen.getByTestId("default-create"));
    const dialog = await screen.findByRole("dialog");
    fireEvent.click(within(dialog).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(rows.length).toBe(1));
    const post = calls.find((r) => r.method === "POST")!;
    expect(await post.clone().json()).toEqual({ channel: "email", events: ["failed"], tenant: "t1" });
    const row = (await within(await screen.findByRole("table")).findByText("email")).closest("tr")!;
    expect(within(row).getByText("failed")).toBeInTheDocument();
  });

  it("shows a member the defaults without the buttons", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/subscriptions/inbox/": () => ({ items: [] }),
      "GET /api/v1/notification-defaults/": () => page([{ id: "d1", tenant_id: "t1", channel: "inapp", events: ["failed"] }]),
    });
    renderAt("/console/notifications");
    await within(await screen.findByRole("table")).findByText("inapp");
    expect(screen.queryByTestId("default-create")).toBeNull();
    expect(screen.queryByTestId("default-edit-inapp")).toBeNull();
  });
});
