import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { renderAt } from "../test/render";


const EMPTY = { next: null, previous: null, results: [] };

describe("pages", () => {
  it("sends a signed-out visitor to sign in", async () => {
    fakeApi({ "GET /api/v1/auth/me": () => json(401, { error: { code: "not_authenticated", message: "no", fields: {} } }) });
    renderAt("/jobs");
    expect(await screen.findByTestId("login-submit")).toBeInTheDocument();
  });

  it("shows a viewer no submit action", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("viewer"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/jobs/": () => EMPTY,
      "GET /api/v1/failure-signatures/": () => EMPTY,
    });
    renderAt("/jobs");
    expect(await screen.findByText("No jobs match. Clear the filters or submit a job.")).toBeInTheDocument();
    expect(screen.queryByText("Submit job")).toBeNull();
    expect(screen.queryByText("Audit log")).toBeNull();
  });

  it("puts the API's validation messages at the submit form's fields", async () => {
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "POST /api/v1/jobs/": () =>
        json(400, {
          error: {
            code: "invalid",
            message: "Invalid input.",
            fields: { resources: { gpus_per_node: ["Ensure this value is less than or equal to 16."] } },
          },
        }),
    });
    renderAt("/jobs/new");
    fireEvent.change(await screen.findByTestId("field-name"), { target: { value: "train" } });
    fireEvent.change(screen.getByTestId("field-command"), { target: { value: "echo hi" } });
    // choose the project
    const project = within(screen.getByTestId("field-project")).getByRole("combobox");
    fireEvent.mouseDown(project);
    fireEvent.click(await screen.findByTitle("vision"));
    fireEvent.click(screen.getByTestId("submit-button"));
    expect(await screen.findByText("Ensure this value is less than or equal to 16.")).toBeInTheDocument();
    const post = calls.find((r) => r.method === "POST")!;
    expect(await post.clone().json()).toMatchObject({ name: "train", project: "p1", command: "echo hi" });
    expect(post.headers.get("X-CSRFToken")).not.toBeNull();
  });

  it("speaks Chinese and remembers the choice", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("admin"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/jobs/": () => EMPTY,
      "GET /api/v1/failure-signatures/": () => EMPTY,
    });
    renderAt("/jobs", "zh");
    expect(await screen.findByText("没有匹配的作业。清除筛选条件或提交作业。")).toBeInTheDocument();
    expect(screen.getAllByText("提交作业").length).toBeGreaterThan(0);
  });

  it("says so when there is an error, with a retry", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/jobs/": () => json(503, { error: { code: "service_unavailable", message: "Database down", fields: {} } }),
      "GET /api/v1/failure-signatures/": () => EMPTY,
    });
    renderAt("/jobs");
    await waitFor(() => expect(screen.getByText(/Database down/)).toBeInTheDocument(), { timeout: 8000 });
    expect(screen.getByRole("button", { name: "Retry" })).toBeInTheDocument();
  });
});

describe("session", () => {
  it("says the session ended when a call is refused after sign-in", async () => {
    let signedIn = true;
    fakeApi({
      "GET /api/v1/auth/me": () =>
        signedIn ? ME("member") : json(401, { error: { code: "not_authenticated", message: "no", fields: {} } }),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/failure-signatures/": () => EMPTY,
      "GET /api/v1/jobs/": () => {
        signedIn = false;
        return json(401, { error: { code: "not_authenticated", message: "expired", fields: {} } });
      },
    });
    renderAt("/jobs");
    expect(await screen.findByText("Your session has ended: sign in again.")).toBeInTheDocument();
    expect(screen.getByTestId("login-submit")).toBeInTheDocument();
  });
});
