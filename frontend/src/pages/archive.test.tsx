import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { renderAt } from "../test/render";

const page = (results: unknown[]) => ({ next: null, previous: null, results });
const VISION = PROJECTS.results[0];
const ARCHIVED = { ...VISION, archived_at: "2026-03-01T10:00:00Z" };

/** The projects API as a list of live and archived rows the calls move between. */
function projectRoutes(role: string, extra: Record<string, (req: Request) => unknown> = {}) {
  const state = { archived: false };
  return {
    state,
    routes: {
      "GET /api/v1/auth/me": () => ME(role),
      "GET /api/v1/projects/": (req: Request) => {
        const wantArchived = new URL(req.url).searchParams.get("archived") === "true";
        return page(wantArchived === state.archived ? [state.archived ? ARCHIVED : { ...VISION, archived_at: null }] : []);
      },
      "POST /api/v1/projects/p1/archive/": async (req: Request) => {
        const { confirm } = await req.clone().json();
        if (confirm !== "vision")
          return json(400, { error: { code: "invalid", message: "Invalid input: confirm: Type the project's slug (vision).", fields: { confirm: ["Type the project's slug (vision)."] } } });
        state.archived = true;
        return ARCHIVED;
      },
      "POST /api/v1/projects/p1/restore/": () => {
        state.archived = false;
        return { ...VISION, archived_at: null };
      },
      ...extra,
    },
  };
}

const archiveOk = () => screen.getByTestId("archive-confirm");

describe("archive instead of delete", () => {
  it("archives a project only once its slug is typed, then shows it under Show archived and restores it", async () => {
    const { state, routes } = projectRoutes("admin");
    const { calls } = fakeApi(routes);
    renderAt("/console/projects");
    const table = await screen.findByRole("table");
    await within(table).findByText("vision");
    expect(screen.queryByRole("button", { name: "Delete" })).toBeNull(); // no delete any more

    fireEvent.click(screen.getByTestId("archive-vision"));
    const dialog = await screen.findByRole("dialog");
    expect(within(dialog).getByText("Archive vision?")).toBeInTheDocument();
    expect(archiveOk()).toBeDisabled();
    const field = within(dialog).getByLabelText("Type vision to confirm");
    fireEvent.change(field, { target: { value: "Vision" } }); // the name, not the slug
    expect(archiveOk()).toBeDisabled();
    fireEvent.change(field, { target: { value: "vision" } });
    expect(archiveOk()).toBeEnabled();
    fireEvent.click(archiveOk());

    await waitFor(() => expect(state.archived).toBe(true));
    const post = calls.find((r) => r.method === "POST")!;
    expect(await post.clone().json()).toEqual({ confirm: "vision" });
    await waitFor(() => expect(within(screen.getByRole("table")).queryByText("vision")).toBeNull());

    fireEvent.click(screen.getByRole("switch", { name: "Show archived" }));
    const row = (await within(screen.getByRole("table")).findByText("vision")).closest("tr")!;
    expect(within(row).getByTestId("archived-tag")).toHaveTextContent("Archived");
    expect(within(row).queryByTestId("archive-vision")).toBeNull();
    expect(calls.some((r) => r.method === "GET" && new URL(r.url).searchParams.get("archived") === "true")).toBe(true);

    fireEvent.click(within(row).getByTestId("restore-vision"));
    await waitFor(() => expect(state.archived).toBe(false));
    expect(await screen.findByText("Nothing archived here.")).toBeInTheDocument();
  });

  it("shows the API's refusals in the dialog and archives nothing", async () => {
    // the page's check passed, the API's did not (its slug changed meanwhile; archived by
    // someone else): its words, the confirmation's at the field
    let answer = json(400, {
      error: {
        code: "invalid",
        message: "Invalid input: confirm: Type the project's slug (vision-2).",
        fields: { confirm: ["Type the project's slug (vision-2)."] },
      },
    });
    const { state, routes } = projectRoutes("admin", { "POST /api/v1/projects/p1/archive/": () => answer });
    fakeApi(routes);
    renderAt("/console/projects");
    fireEvent.click(await screen.findByTestId("archive-vision"));
    const dialog = await screen.findByRole("dialog");
    fireEvent.change(within(dialog).getByTestId("archive-name"), { target: { value: "vision" } });
    fireEvent.click(archiveOk());
    const alert = await within(dialog).findByRole("alert");
    expect(alert).toHaveTextContent("Invalid input: confirm: Type the project's slug (vision-2).");
    expect(within(alert).getByText("Type the project's slug (vision-2).")).toBeInTheDocument();

    answer = json(409, { error: { code: "conflict", message: "Project vision is already archived.", fields: {} } });
    fireEvent.click(archiveOk());
    await waitFor(() => expect(within(dialog).getByRole("alert")).toHaveTextContent("Project vision is already archived."));
    expect(state.archived).toBe(false);
  });

  it("sends nothing until the name matches, Enter included", async () => {
    const { routes } = projectRoutes("admin");
    const { calls } = fakeApi(routes);
    renderAt("/console/projects");
    fireEvent.click(await screen.findByTestId("archive-vision"));
    const field = within(await screen.findByRole("dialog")).getByTestId("archive-name");
    fireEvent.change(field, { target: { value: "vision " } });
    expect(archiveOk()).toBeDisabled();
    fireEvent.keyDown(field, { key: "Enter", code: "Enter", keyCode: 13 });
    fireEvent.click(archiveOk());
    await new Promise((r) => setTimeout(r, 50));
    expect(calls.some((r) => r.method === "POST")).toBe(false);
  });

  it("shows a member the badge but neither Archive nor Restore", async () => {
    const { state, routes } = projectRoutes("member");
    state.archived = true;
    fakeApi(routes);
    renderAt("/console/projects");
    fireEvent.click(await screen.findByRole("switch", { name: "Show archived" }));
    const row = (await within(screen.getByRole("table")).findByText("vision")).closest("tr")!;
    expect(within(row).getByTestId("archived-tag")).toBeInTheDocument();
    expect(within(row).queryByTestId("restore-vision")).toBeNull();
    expect(screen.queryByTestId("archive-vision")).toBeNull();
  });

  it("archives a dataset from the catalogue by its name, in Chinese", async () => {
    let archived = false;
    const dataset = {
      id: "ds1",
      tenant: "t1",
      project: "p1",
      project_slug: "vision",
      name: "images",
      description: "",
      latest_version: 1,
      created_by: "ada",
      created_at: "2026-01-01T00:00:00Z",
      archived_at: null,
    };
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/datasets/": (req) =>
        page((new URL(req.url).searchParams.get("archived") === "true") === archived ? [{ ...dataset, archived_at: archived ? "2026-03-01T10:00:00Z" : null }] : []),
      "POST /api/v1/datasets/ds1/archive/": () => {
        archived = true;
        return { ...dataset, archived_at: "2026-03-01T10:00:00Z" };
      },
    });
    renderAt("/datasets", "zh");
    fireEvent.click(await screen.findByTestId("archive-images"));
    const dialog = await screen.findByRole("dialog");
    expect(within(dialog).getByText("归档 images？")).toBeInTheDocument();
    fireEvent.change(within(dialog).getByLabelText("输入 images 以确认"), { target: { value: "images" } });
    fireEvent.click(archiveOk());
    await waitFor(() => expect(archived).toBe(true));
    expect(await calls.find((r) => r.method === "POST")!.clone().json()).toEqual({ confirm: "images" });
    fireEvent.click(screen.getByRole("switch", { name: "显示已归档" }));
    expect(await screen.findByTestId("archived-tag")).toHaveTextContent("已归档");
  });
});
