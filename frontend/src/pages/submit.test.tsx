import { describe, expect, it } from "vitest";
import { fireEvent, screen, within } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { renderAt } from "../test/render";

const cluster = (name: string, backend: string, is_default: boolean, partitions: string[]) => ({
  id: name,
  name,
  backend,
  is_default,
  supports_containers: backend === "kubernetes",
  healthy: true,
  last_error: "",
  last_synced_at: null,
  last_reconciled_at: null,
  partitions: partitions.map((p, i) => ({ name: p, is_default: i === 0, state: "UP", max_time_minutes: null, node_names: [] })),
});
const page = (results: unknown[]) => ({ next: null, previous: null, results });

async function choose(testId: string, title: string) {
  fireEvent.mouseDown(within(screen.getByTestId(testId)).getByRole("combobox"));
  fireEvent.click(await screen.findByTitle(title));
}

describe("submit form, with more than one cluster", () => {
  it("names the chosen cluster in the spec, and the API's refusal lands at the field", async () => {
    const { calls } = fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/clusters/": () =>
        page([cluster("local", "slurm", true, ["gpu"]), cluster("local-k8s", "kubernetes", false, ["default"])]),
      "POST /api/v1/jobs/": () =>
        json(400, {
          error: {
            code: "invalid",
            message: "Invalid input.",
            fields: { environment: { image: ["Slurm cluster local runs no containers."] }, cluster: ["No cluster named 'x'."] },
          },
        }),
    });
    renderAt("/jobs/new");
    fireEvent.change(await screen.findByTestId("field-name"), { target: { value: "train" } });
    fireEvent.change(screen.getByTestId("field-command"), { target: { value: "echo hi" } });
    await choose("field-project", "vision");
    await choose("field-cluster", "local-k8s (kubernetes)");
    fireEvent.click(screen.getByTestId("submit-button"));
    expect(await screen.findByText("No cluster named 'x'.")).toBeInTheDocument();
    const post = calls.find((r) => r.method === "POST")!;
    expect(await post.clone().json()).toMatchObject({ name: "train", cluster: "local-k8s" });
  });

  it("offers no cluster choice when there is one cluster", async () => {
    fakeApi({
      "GET /api/v1/auth/me": () => ME("member"),
      "GET /api/v1/projects/": () => PROJECTS,
      "GET /api/v1/clusters/": () => page([cluster("local", "slurm", true, ["gpu"])]),
    });
    renderAt("/jobs/new");
    await screen.findByText("gpu"); // the clusters are in: the default partition is the hint
    expect(screen.queryByTestId("field-cluster")).toBeNull();
  });
});
