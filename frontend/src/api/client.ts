// The one HTTP client: typed from the generated OpenAPI schema (schema.d.ts), session cookie
// and CSRF header, and the project's error envelope turned into ApiError.
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema";

export type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type JobDetail = Schemas["JobDetail"];
export type JobSpec = Schemas["JobSpecRequest"];
export type JobState = Schemas["JobStateEnum"];
export type LogLine = Schemas["LogLine"];
export type Me = Schemas["Me"];

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
    public fields: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export function csrfToken(): string {
  const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

// Set by the app: what to do when the session has ended (back to the sign-in page).
export const session = { onExpired: () => {} };

const csrf: Middleware = {
  async onRequest({ request }) {
    if (!["GET", "HEAD", "OPTIONS"].includes(request.method)) {
      request.headers.set("X-CSRFToken", csrfToken());
    }
    return request;
  },
};

// fetch looked up at each call (tests and benchmarks may wrap it)
export const api = createClient<paths>({
  baseUrl: window.location.origin,
  credentials: "same-origin",
  fetch: (req: Request) => globalThis.fetch(req),
});
api.use(csrf);

type Envelope = { error?: { code?: string; message?: string; fields?: Record<string, unknown> } };

/** The data of an openapi-fetch answer, or an ApiError (401 also ends the session). */
export function unwrap<T>(res: { data?: T; error?: unknown; response: Response }): T {
  if (res.response.ok) return res.data as T;
  const env = (res.error ?? {}) as Envelope;
  const status = res.response.status;
  if (status === 401) session.onExpired();
  throw new ApiError(
    status,
    env.error?.code ?? String(status),
    env.error?.message ?? res.response.statusText,
    env.error?.fields ?? {},
  );
}

/** The cursor of a DRF cursor-paginated `next`/`previous` URL. */
export function cursorOf(url: string | null | undefined): string | undefined {
  if (!url) return undefined;
  return new URL(url, window.location.origin).searchParams.get("cursor") ?? undefined;
}

/** Flatten DRF's nested field errors ({resources: {gpus_per_node: ["..."]}}) to dotted names. */
export function flatFields(fields: Record<string, unknown>, prefix = ""): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(fields)) {
    const name = prefix ? `${prefix}.${k}` : k;
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) out[name] = v.join(" ");
    else if (typeof v === "string") out[name] = v;
    else if (v && typeof v === "object") Object.assign(out, flatFields(v as Record<string, unknown>, name));
  }
  return out;
}

export function wsUrl(path: string): string {
  const proto = window.location.protocol === "https:" ? "wss:" : "ws:";
  return `${proto}//${window.location.host}${path}`;
}

/** /api/v1/usage/ rows (the answer also carries `storage`, bytes held per tenant and project). */
export function usageRows(data: Schemas["Usage"]): Schemas["UsageRow"][] {
  return data.results;
}
