// Upload files into a dataset version, resumably (docs/datasets.md), as the CLI does: continue
// the dataset's open version if an upload was interrupted (else open the next one), ask the
// server where each file stands (GET .../upload/?path=), send only the rest in chunks
// (PUT .../upload/?path=&offset=&total=, raw body), then commit. A dropped connection, a 5xx or
// a 409 offset_mismatch asks the server again and continues from there, a few times with a
// growing pause; past that the upload stops uncommitted and picking the same files again
// resumes it.
import { api, ApiError, csrfToken, unwrap, type Schemas } from "./api/client";

export const CHUNK = 8 * 1024 * 1024;
export const RETRIES = 4;
const HASH_LIMIT = 512 * 1024 * 1024; // larger files the server holds whole are trusted by size

export type UploadFile = { path: string; blob: Blob };
type UploadState = Schemas["DatasetUploadState"];
export type UploadOptions = {
  chunk?: number;
  retries?: number;
  pause?: (attempt: number) => Promise<void>; // between tries (tests make it instant)
};

/** A picked file's path inside the version: a directory pick drops its top folder. */
export function relPath(f: File): string {
  const rel = (f as File & { webkitRelativePath?: string }).webkitRelativePath;
  return rel ? rel.split("/").slice(1).join("/") || f.name : f.name;
}

/** The dataset's open version (an upload left unfinished), if any. */
export async function openVersion(datasetId: string): Promise<Schemas["DatasetVersion"] | null> {
  const open = unwrap(
    await api.GET("/api/v1/datasets/{dataset_pk}/versions/", {
      params: { path: { dataset_pk: datasetId }, query: { state: "open", page_size: 100 } },
    }),
  ).results;
  return open.length ? open[open.length - 1] : null;
}

const pauseFor = (attempt: number) => new Promise<void>((r) => setTimeout(r, Math.min(500 * 2 ** attempt, 8000)));

/** What a failed request means here: worth asking the server again, or final. */
function resumable(e: unknown): boolean {
  if (e instanceof ApiError)
    return e.status >= 500 || e.code === "offset_mismatch" || e.code === "upload_interrupted";
  return e instanceof TypeError; // fetch: the connection failed or dropped
}

async function sha256Hex(blob: Blob): Promise<string | null> {
  if (!globalThis.crypto?.subtle || blob.size > HASH_LIMIT) return null; // not a secure context
  const digest = await crypto.subtle.digest("SHA-256", await blob.arrayBuffer());
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function call(url: string, init: RequestInit): Promise<UploadState> {
  const res = await globalThis.fetch(
    new Request(url, { credentials: "same-origin", ...init, headers: { "X-CSRFToken": csrfToken(), ...init.headers } }),
  );
  const body = await res.json().catch(() => ({}));
  return unwrap({ data: body as UploadState, error: res.ok ? undefined : body, response: res });
}

/** Sends one file from where the server's copy ends; `onSent` gets the bytes it now holds. */
async function uploadFile(
  base: string,
  f: UploadFile,
  onSent: (held: number) => void,
  opts: Required<UploadOptions>,
): Promise<void> {
  const size = f.blob.size;
  const url = (q: Record<string, string>) => `${base}/upload/?${new URLSearchParams({ path: f.path, ...q })}`;
  let tries = 0;
  for (;;) {
    try {
      const state = await call(url({}), { method: "GET" });
      let offset = state.offset;
      if (state.complete) {
        const same = state.file && state.file.size === size;
        const hash = same ? await sha256Hex(f.blob) : null;
        if (same && (hash === null || hash === state.file!.sha256)) {
          onSent(size);
          return;
        }
        offset = 0; // another file under that path: replace it
      }
      onSent(offset);
      do {
        const piece = f.blob.slice(offset, Math.min(offset + opts.chunk, size));
        const held = await call(url({ offset: String(offset), total: String(size) }), {
          method: "PUT",
          headers: { "Content-Type": "application/octet-stream" },
          body: await piece.arrayBuffer(), // at most one chunk in memory
        });
        offset = held.complete ? size : held.offset;
        onSent(offset);
        tries = 0; // progress made: the next failure starts its count again
      } while (offset < size);
      return;
    } catch (e) {
      if (!resumable(e) || ++tries > opts.retries) throw e;
      await opts.pause(tries);
    }
  }
}

/** Uploads `files` into the open version of `datasetId` (or the next one) and commits it;
 * returns its number. */
export async function uploadVersion(
  datasetId: string,
  files: UploadFile[],
  onProgress: (sent: number, total: number) => void,
  options: UploadOptions = {},
): Promise<number> {
  const opts = { chunk: CHUNK, retries: RETRIES, pause: pauseFor, ...options };
  const version =
    (await openVersion(datasetId)) ??
    unwrap(
      await api.POST("/api/v1/datasets/{dataset_pk}/versions/", {
        params: { path: { dataset_pk: datasetId } },
        body: { notes: "" },
      }),
    );
  const n = version.number;
  const base = `${window.location.origin}/api/v1/datasets/${datasetId}/versions/${n}`;
  const total = files.reduce((s, f) => s + f.blob.size, 0);
  let before = 0; // bytes of the files already done
  onProgress(0, total);
  for (const f of files) {
    await uploadFile(base, f, (held) => onProgress(before + held, total), opts);
    before += f.blob.size;
  }
  unwrap(
    await api.POST("/api/v1/datasets/{dataset_pk}/versions/{number}/commit/", {
      params: { path: { dataset_pk: datasetId, number: String(n) } },
    }),
  );
  return n;
}
