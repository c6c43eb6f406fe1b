import { describe, expect, it } from "vitest";
import { fireEvent, screen, waitFor } from "@testing-library/react";
import { ME, PROJECTS, fakeApi, json } from "../test/fakeApi";
import { CHUNK, uploadVersion } from "../datasetUpload";
import { renderAt } from "../test/render";

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


function routes(role: string) {
  return {
    "GET /api/v1/auth/me": () => ME(role),
    "GET /api/v1/projects/": () => PROJECTS,
    "GET /api/v1/datasets/": () => page([DATASET]),
    "GET /api/v1/datasets/d1/versions/": () => page([]),
    "GET /api/v1/datasets/d1/compare/": () => ({ a: 1, b: 2, added: ["new.txt"], removed: ["old.txt"], changed: [], unchanged: 3 }),
  };
}

/** The upload API of one open version, in memory: GET says where a file stands, PUT appends
 * at that offset (else 409 offset_mismatch), commit seals. `drop(n)` makes the n-th PUT store
 * only half its body and then fail as a dropped connection does. */
function uploadServer(opts: { open?: number | null; held?: Record<string, Uint8Array> } = {}) {
  const held: Record<string, Uint8Array> = { ...(opts.held ?? {}) };
  const totals: Record<string, number> = {};
  let version = opts.open ?? null;
  let puts = 0;
  const drops = new Set<number>();
  const state = (path: string) => {
    const bytes = held[path] ?? new Uint8Array();
    const complete = path in totals && bytes.length === totals[path];
    return { path, offset: bytes.length, complete, file: complete ? { path, size: bytes.length, sha256: "x" } : null };
  };
  const routes = {
    "GET /api/v1/datasets/d1/versions/": () => page(version ? [{ number: version, state: "open" }] : []),
    "POST /api/v1/datasets/d1/versions/": () => ({ number: (version = 3) }),
    "GET /api/v1/datasets/d1/versions/3/upload/": (r: Request) => state(new URL(r.url).searchParams.get("path")!),
    "PUT /api/v1/datasets/d1/versions/3/upload/": async (r: Request) => {
      const q = new URL(r.url).searchParams;
      const path = q.get("path")!;
      const body = new Uint8Array(await r.arrayBuffer());
      const have = held[path] ?? new Uint8Array();
      if (Number(q.get("offset")) !== have.length)
        return json(409, { error: { code: "offset_mismatch", message: "offset", fields: {}, offset: have.length } });
      totals[path] = Number(q.get("total"));
      const keep = drops.has(++puts) ? body.slice(0, Math.floor(body.length / 2)) : body;
      const next = new Uint8Array(have.length + keep.length);
      next.set(have);
      next.set(keep, have.length);
      held[path] = next;
      if (keep !== body) throw new TypeError("Failed to fetch");
      return state(path);
    },
    "POST /api/v1/datasets/d1/versions/3/commit/": () => ({ number: 3, state: "committed" }),
  };
  return { routes, held, drop: (n: number) => drops.add(n) };
}

const putsOf = (calls: Request[]) =>
  calls.filter((r) => r.method === "PUT").map((r) => new URL(r.url).searchParams).map((q) => [q.get("path"), q.get("offset")]);
const instant = { pause: async () => {} };

describe("datasets", () => {
  it("uploads files in chunks at increasing offsets, then commits", async () => {
    const server = uploadServer();
    const { calls } = fakeApi(server.routes);
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

  it("resumes an interrupted chunk from where the server's copy ends", async () => {
    const server = uploadServer();
    server.drop(2); // the second chunk: half of it arrives, then the connection drops
    const { calls } = fakeApi(server.routes);
    const data = new Uint8Array(250).map((_, i) => i);
    const n = await uploadVersion("d1", [{ path: "x.bin", blob: new Blob([data]) }], () => {}, { chunk: 100, ...instant });
    expect(n).toBe(3);
    expect(putsOf(calls)).toEqual([
      ["x.bin", "0"],
      ["x.bin", "100"], // dropped after 50 bytes
      ["x.bin", "150"], // asked the server, went on from there to the end
    ]);
    expect(Array.from(server.held["x.bin"])).toEqual(Array.from(data)); // every byte once, in order
    expect(calls.at(-1)!.url).toMatch(/commit\/$/);
  });

  it("continues the version an earlier upload left open, sending only what is missing", async () => {
    const server = uploadServer({ open: 3, held: { "a.bin": new Uint8Array([1, 2, 3]) } });
    const { calls } = fakeApi(server.routes);
    const seen: number[] = [];
    const n = await uploadVersion(
      "d1",
      [{ path: "a.bin", blob: new Blob([new Uint8Array([1, 2, 3, 4, 5])]) }],
      (sent) => seen.push(sent),
      instant,
    );
    expect(n).toBe(3);
    expect(calls.some((r) => r.method === "POST" && new URL(r.url).pathname.endsWith("/versions/"))).toBe(false);
    expect(putsOf(calls)).toEqual([["a.bin", "3"]]);
    expect(seen).toEqual([0, 3, 5]);
  });

  it("gives up after its retries, uncommitted, and stops at once at a refused chunk", async () => {
    const server = uploadServer();
    const { calls } = fakeApi({
      ...server.routes,
      "PUT /api/v1/datasets/d1/versions/3/upload/": () => {
        throw new TypeError("Failed to fetch");
      },
    });
    await expect(uploadVersion("d1", [{ path: "x", blob: new Blob(["hi"]) }], () => {}, { retries: 2, ...instant })).rejects.toThrow(
      "Failed to fetch",
    );
    expect(putsOf(calls)).toHaveLength(3); // the first try and two more
    expect(calls.some((r) => r.url.includes("/commit/"))).toBe(false);

    const refused = fakeApi({
      ...uploadServer().routes,
      "PUT /api/v1/datasets/d1/versions/3/upload/": () =>
        json(409, { error: { code: "storage_quota_exceeded", message: "Quota exceeded", fields: {} } }),
    });
    await expect(uploadVersion("d1", [{ path: "x", blob: new Blob(["hi"]) }], () => {}, instant)).rejects.toThrow("Quota exceeded");
    expect(putsOf(refused.calls)).toHaveLength(1);
    expect(refused.calls.some((r) => r.url.includes("/commit/"))).toBe(false);
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

  it("offers to resume or discard a version an upload left open", async () => {
    const { calls } = fakeApi({
      ...routes("member"),
      "GET /api/v1/datasets/d1/versions/": () => page([{ id: "v3", number: 3, state: "open", file_count: 1, size_bytes: 5 }]),
      "DELETE /api/v1/datasets/d1/versions/3/": () => new Response(null, { status: 204 }),
    });
    renderAt("/datasets");
    fireEvent.click(await screen.findByRole("button", { name: /expand row/i }));
    expect(await screen.findByTestId("upload-unfinished")).toHaveTextContent("Version 3 was left unfinished");
    expect(screen.getByText("Resume with files")).toBeInTheDocument();
    fireEvent.click(screen.getByRole("button", { name: "Discard" }));
    await waitFor(() => expect(calls.some((r) => r.method === "DELETE" && r.url.endsWith("/versions/3/"))).toBe(true));
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
