import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { renderAt } from "../test/render";

const page = (results: unknown[]) => ({ next: null, previous: null, results });

describe("notification subscriptions", () => {
  it("subscribes to the bell alone without an address, shows a webhook's secret once, and removes one", async () => {
    const rows: Record<string, unknown>[] = [];
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/subscriptions/inbox/": () => ({ items: [] }),
      "GET /api/v1/subscriptions/": () => page(rows),
      "POST /api/v1/subscriptions/": async (req: Request) => {
        const body = await req.clone().json();
        if (body.channel === "webhook" && !body.address.startsWith("https://"))
          return json(400, { error: { code: "invalid", message: "Invalid input: address: Only https URLs are allowed.", fields: { address: ["Only https URLs are allowed."] } } });
        const row = { id: `s${rows.length + 1}`, project: body.project, job: body.job, events: body.events, channel: body.channel, address: body.address, failing_since: null, last_error: "" };
        rows.push(row);
        return { ...row, secret: body.channel === "webhook" ? "s3cr3t-once" : "" };
      },
      "DELETE /api/v1/subscriptions/s1/": () => {
        rows.splice(0, 1);
        return json(204, null);
      },
    });
    renderAt("/notifications");
    await screen.findByText("No subscriptions yet: subscribe to your jobs' events.");
    fireEvent.click(screen.getByTestId("sub-create"));
    let dialog = await screen.findByRole("dialog");
    expect(within(dialog).queryByLabelText("Address")).toBeNull(); // inapp: the bell, no address
    fireEvent.click(within(dialog).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(rows.length).toBe(1));
    const first = calls.find((r) => r.method === "POST")!;
    expect(await first.clone().json()).toEqual({ events: ["failed", "succeeded"], channel: "inapp", address: "", project: null, job: null });
    await within(await screen.findByRole("table")).findByText("all my jobs");

    fireEvent.click(screen.getByTestId("sub-create"));
    dialog = await screen.findByRole("dialog");
    fireEvent.mouseDown(within(dialog).getAllByRole("combobox", { name: "Channel" })[0]);
    fireEvent.click(await screen.findByTitle("webhook"));
    fireEvent.change(await within(dialog).findByLabelText("Address"), { target: { value: "https://ci.example.org/hook" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Save" }));
    expect(await screen.findByTestId("sub-secret")).toHaveTextContent("s3cr3t-once");

    const row = (await within(screen.getByRole("table")).findByText("inapp")).closest("tr")!;
    fireEvent.click(within(row).getByRole("button", { name: "Delete" }));
    fireEvent.click(await screen.findByRole("button", { name: "OK" }));
    await waitFor(() => expect(rows.map((r) => r.channel)).toEqual(["webhook"]));
  });
});
