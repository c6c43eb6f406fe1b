// Upload files into a new dataset version: open the version, send each file in chunks
// (PUT .../upload/?path=&offset=&total=, raw body), then commit (docs/datasets.md).
import { api, csrfToken, unwrap } from "./api/client";

export const CHUNK = 8 * 1024 * 1024;

export type UploadFile = { path: string; blob: Blob };

/** A picked file's path inside the version: a directory pick drops its top folder. */
export function relPath(f: File): string {
  const rel = (f as File & { webkitRelativePath?: string }).webkitRelativePath;
  return rel ? rel.split("/").slice(1).join("/") || f.name : f.name;
}

/** Opens the next version of `datasetId`, uploads `files`, commits it; returns its number. */
export async function uploadVersion(
  datasetId: string,
  files: UploadFile[],
  onProgress: (sent: number, total: number) => void,
): Promise<number> {
  const version = unwrap(
    await api.POST("/api/v1/datasets/{dataset_pk}/versions/", { params: { path: { dataset_pk: datasetId } }, body: { notes: "" } }),
  );
  const n = version.number;
  const total = files.reduce((s, f) => s + f.blob.size, 0);
  let sent = 0;
  onProgress(0, total);
  for (const f of files) {
    const size = f.blob.size;
    let offset = 0;
    do {
      const piece = f.blob.slice(offset, Math.min(offset + CHUNK, size));
      const q = new URLSearchParams({ path: f.path, offset: String(offset), total: String(size) });
      const res = await globalThis.fetch(
        new Request(`${window.location.origin}/api/v1/datasets/${datasetId}/versions/${n}/upload/?${q}`, {
          method: "PUT",
          credentials: "same-origin",
          headers: { "X-CSRFToken": csrfToken(), "Content-Type": "application/octet-stream" },
          body: await piece.arrayBuffer(), // at most one chunk in memory
        }),
      );
      const error = res.ok ? undefined : await res.json().catch(() => ({}));
      unwrap({ data: undefined, error, response: res });
      offset += piece.size;
      sent += piece.size;
      onProgress(sent, total);
    } while (offset < size);
  }
  unwrap(
    await api.POST("/api/v1/datasets/{dataset_pk}/versions/{number}/commit/", {
      params: { path: { dataset_pk: datasetId, number: String(n) } },
    }),
  );
  return n;
}
