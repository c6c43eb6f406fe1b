import { describe, expect, it } from "vitest";
import { MemoryRouter } from "react-router-dom";
import { fireEvent, render, screen, waitFor } from "@testing-library/react";
import { AppProviders, makeQueryClient } from "../providers";
import { App } from "../App";
import { ME, PROJECTS, fakeApi } from "../test/fakeApi";
import { CHUNK, uploadVersion } from "../datasetUpload";
import type { Lang } from "../i18n";

const DATASET = {
  id: "d1",
  tenant: "t1",
  project: "p1",
  project_slug: "vision",
  name: "images",
  description: "",
  latest_version: 2,
  created_by: "ada",
  created_at: "2026-01-01T00:00:00Z",
};
const page = (results: unknown[]) => ({ next: null, previous: null, results });

function renderAt(path: string, lang: Lang = "en") {
  return render(
    <MemoryRouter initialEntries={[path]}>
      <AppProviders client={makeQueryClient()} lang={lang}>
        <App />
      </AppProviders>
    </MemoryRouter>,
  );
}

function routes(role: string) {
  return {
    "GET /api/v1/auth/me": () => ME(role),
    "GET /api/v1/projects/": () => PROJECTS,
    "GET /api/v1/datasets/": () => page([DATASET]),
    "GET /api/v1/datasets/d1/versions/": () => page([]),
    "GET /api/v1/datasets/d1/compare/": () => ({ a: 1, b: 2, added: ["new.txt"], removed: ["old.txt"], changed: [], unchanged: 3 }),
  };
}

describe("datasets", () => {
  it("uploads files in chunks at increasing offsets, then commits", async () => {
    const { calls } = fakeApi({
      "POST /api/v1/datasets/d1/versions/": () => ({ number: 3 }),
      "PUT /api/v1/datasets/d1/versions/3/upload/": () => ({ offset: 0, complete: false }),
      "POST /api/v1/datasets/d1/versions/3/commit/": () => ({ number: 3, state: "committed" }),
    });
    const big = new Blob([new Uint8Array(CHUNK + 10)]);
    const seen: number[] = [];
    const n = await uploadVersion(
      "d1",
      [
        { path: "a/big.bin", blob: big },
        { path: "empty.txt", blob: new Blob([]) },
      ],
      (sent, total) => seen.push(Math.round((sent * 100) / total)),
    );
    expect(n).toBe(3);
    const puts = calls.filter((r) => r.method === "PUT").map((r) => new URL(r.url).searchParams);
    expect(puts.map((q) => [q.get("path"), q.get("offset"), q.get("total")])).toEqual([
      ["a/big.bin", "0", String(CHUNK + 10)],
      ["a/big.bin", String(CHUNK), String(CHUNK + 10)],
      ["empty.txt", "0", "0"],
    ]);
    expect(calls.filter((r) => r.method === "PUT").every((r) => r.headers.get("X-CSRFToken") !== null)).toBe(true);
    expect(calls.at(-1)!.url).toMatch(/versions\/3\/commit\/$/);
    expect(seen.at(-1)).toBe(100);
  });

  it("stops at a refused chunk and does not commit", async () => {
    const { calls } = fakeApi({
      "POST /api/v1/datasets/d1/versions/": () => ({ number: 3 }),
      "PUT /api/v1/datasets/d1/versions/3/upload/": () =>
        new Response(JSON.stringify({ error: { code: "storage_quota_exceeded", message: "Quota exceeded", fields: {} } }), {
          status: 409,
          headers: { "Content-Type": "application/json" },
        }),
    });
    await expect(uploadVersion("d1", [{ path: "x", blob: new Blob(["hi"]) }], () => {})).rejects.toThrow("Quota exceeded");
    expect(calls.some((r) => r.url.includes("/commit/"))).toBe(false);
  });

  it("shows the diff of two versions, and upload only to those who may", async () => {
    fakeApi(routes("member"));
    renderAt("/datasets");
    fireEvent.click(await screen.findByRole("button", { name: /expand row/i }));
    expect(await screen.findByText("Upload files as a new version")).toBeInTheDocument();
    fireEvent.click(screen.getByTestId("compare-go"));
    expect(await screen.findByText("new.txt")).toBeInTheDocument();
    expect(screen.getByText("old.txt")).toBeInTheDocument();
    expect(screen.getByText("3 files unchanged.")).toBeInTheDocument();
  });

  it("hides upload from a viewer and speaks Chinese", async () => {
    fakeApi(routes("viewer"));
    renderAt("/datasets", "zh");
    fireEvent.click(await screen.findByRole("button", { name: /展开行|expand row/i }));
    await waitFor(() => expect(screen.getByTestId("compare-go")).toBeInTheDocument());
    expect(screen.getByTestId("compare-go").textContent?.replace(/\s/g, "")).toBe("比较");
    expect(screen.queryByText("上传文件为新版本")).toBeNull();
  });
});
