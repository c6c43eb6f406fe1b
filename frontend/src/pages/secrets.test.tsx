import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { renderAt } from "../test/render";

const VALUE = "hf_very-secret-value-42";
const SECRET = {
  name: "HF_TOKEN",
  version: 2,
  created_at: "2026-01-01T00:00:00Z",
  updated_at: "2026-01-02T00:00:00Z",
  updated_by: "ada",
};
const page = (results: unknown[]) => ({ next: null, previous: null, results });
const LIST = "GET /api/v1/projects/p1/secrets/";

function routes(role: string, extra: Record<string, (req: Request) => unknown> = {}) {
  return {
    "GET /api/v1/auth/me": () => ME(role),
    "GET /api/v1/projects/": () => PROJECTS,
    [LIST]: () => page([SECRET]),
    ...extra,
  };
}

describe("project secrets console", () => {
  it("sets a value through a hidden field that is empty again after saving", async () => {
    let rows = [SECRET];
    const { calls } = fakeApi(
      routes("member", {
        [LIST]: () => page(rows),
        "PUT /api/v1/projects/p1/secrets/WB_KEY/": () => {
          const created = { ...SECRET, name: "WB_KEY", version: 1 };
          rows = [...rows, created];
          return json(201, created);
        },
      }),
    );
    renderAt("/console/secrets");
    expect(await screen.findByText("HF_TOKEN")).toBeInTheDocument();
    const table = within(screen.getByRole("table"));
    expect(table.getByText("v2")).toBeInTheDocument();
    expect(table.getByText("ada")).toBeInTheDocument();

    fireEvent.click(screen.getByTestId("secret-create"));
    fireEvent.change(await screen.findByTestId("secret-name"), { target: { value: "WB_KEY" } });
    const field = screen.getByTestId("secret-value") as HTMLInputElement;
    expect(field.type).toBe("password");
    // no "show password" eye: the value cannot be revealed on screen
    expect(field.closest(".ant-input-affix-wrapper")?.querySelector(".ant-input-password-icon")).toBeNull();
    fireEvent.change(field, { target: { value: VALUE } });
    fireEvent.click(screen.getByRole("button", { name: /save/i }));

    expect(await screen.findByText("WB_KEY")).toBeInTheDocument();
    const put = calls.find((r) => r.method === "PUT")!;
    expect(await put.clone().json()).toEqual({ value: VALUE });
    // the value is nowhere on the page now: not in its text, not in any field
    const values = () => Array.from(document.querySelectorAll("input, textarea")).map((i) => (i as HTMLInputElement).value);
    await waitFor(() => expect(screen.queryByTestId("secret-value")).toBeNull());
    expect(values()).not.toContain(VALUE);
    expect(document.body.textContent).not.toContain(VALUE);
    // and a second dialog starts empty
    fireEvent.click(screen.getByTestId("secret-replace-HF_TOKEN"));
    expect(((await screen.findByTestId("secret-value")) as HTMLInputElement).value).toBe("");
    expect((screen.getByTestId("secret-name") as HTMLInputElement).value).toBe("HF_TOKEN");
    expect(screen.getByTestId("secret-name")).toBeDisabled();
  });

  it("puts the API's field error at the field, and a bad name never leaves the browser", async () => {
    const { calls } = fakeApi(
      routes("admin", {
        "PUT /api/v1/projects/p1/secrets/HF_TOKEN/": () =>
          json(400, { error: { code: "invalid", message: "Invalid input: value: too long", fields: { value: ["At most 64 KiB."] } } }),
      }),
    );
    renderAt("/console/secrets");
    fireEvent.click(await screen.findByTestId("secret-create"));
    fireEvent.change(await screen.findByTestId("secret-name"), { target: { value: "NOT-A-NAME" } });
    fireEvent.change(screen.getByTestId("secret-value"), { target: { value: "x" } });
    fireEvent.click(screen.getByRole("button", { name: /save/i }));
    expect((await screen.findAllByText(/a letter or _, then letters/)).length).toBeGreaterThan(0);
    expect(calls.filter((r) => r.method === "PUT")).toHaveLength(0);

    fireEvent.change(screen.getByTestId("secret-name"), { target: { value: "HF_TOKEN" } });
    fireEvent.click(screen.getByRole("button", { name: /save/i }));
    expect(await screen.findByText("At most 64 KiB.")).toBeInTheDocument();
    expect(calls.filter((r) => r.method === "PUT")).toHaveLength(1);
  });

  it("deletes a secret after asking", async () => {
    let rows = [SECRET];
    const { calls } = fakeApi(
      routes("member", {
        [LIST]: () => page(rows),
        "DELETE /api/v1/projects/p1/secrets/HF_TOKEN/": () => {
          rows = [];
          return new Response(null, { status: 204 });
        },
      }),
    );
    renderAt("/console/secrets");
    expect(await screen.findByText("HF_TOKEN")).toBeInTheDocument();
    fireEvent.click(screen.getByRole("button", { name: "Delete" }));
    expect(calls.filter((r) => r.method === "DELETE")).toHaveLength(0); // asked first
    fireEvent.click(await screen.findByRole("button", { name: "OK" }));
    await waitFor(() => expect(screen.queryByText("HF_TOKEN")).toBeNull());
    const gone = calls.find((r) => r.method === "DELETE")!;
    expect(new URL(gone.url).pathname).toBe("/api/v1/projects/p1/secrets/HF_TOKEN/");
  });

  it("shows a viewer the names only, with no way to set, replace or delete, in Chinese", async () => {
    fakeApi(routes("viewer"));
    renderAt("/console/secrets", "zh");
    expect(await screen.findByText("HF_TOKEN")).toBeInTheDocument();
    expect(screen.getAllByText("项目机密").length).toBeGreaterThan(0); // the menu and the title
    expect(screen.queryByTestId("secret-create")).toBeNull();
    expect(screen.queryByTestId("secret-replace-HF_TOKEN")).toBeNull();
    expect(screen.queryByRole("button", { name: "删除" })).toBeNull();
    expect(screen.queryByText("操作")).toBeNull(); // no actions column at all
  });

  it("offers the project's secret names on the submit form and sends them in the spec", async () => {
    const { calls } = fakeApi({
      ...routes("member"),
      "GET /api/v1/clusters/": () => page([]),
      "POST /api/v1/jobs/": () => json(400, { error: { code: "invalid", message: "stop here", fields: {} } }),
    });
    renderAt("/jobs/new");
    fireEvent.change(await screen.findByTestId("field-name"), { target: { value: "train" } });
    fireEvent.change(screen.getByTestId("field-command"), { target: { value: "python train.py" } });
    fireEvent.mouseDown(within(screen.getByTestId("field-project")).getByRole("combobox"));
    fireEvent.click(await screen.findByTitle("vision"));
    fireEvent.click(screen.getByText(/^Environment ·/)); // open the panel with env and secrets
    expect(screen.getByText(/Not secret: everyone who can see the job/)).toBeInTheDocument();
    fireEvent.mouseDown(within(screen.getByTestId("field-secrets")).getByRole("combobox"));
    fireEvent.click(await screen.findByTitle("HF_TOKEN"));
    fireEvent.click(screen.getByTestId("submit-button"));
    await waitFor(() => expect(calls.some((r) => r.method === "POST")).toBe(true));
    const post = calls.find((r) => r.method === "POST")!;
    expect(await post.clone().json()).toMatchObject({ project: "p1", name: "train", secrets: ["HF_TOKEN"] });
  });
});
