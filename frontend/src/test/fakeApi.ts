// Component tests answer the UI's HTTP calls from a table (the e2e tests use the real API).
import { vi } from "vitest";

type Handler = (req: Request) => unknown | Response | Promise<unknown | Response>;

export function fakeApi(routes: Record<string, Handler>) {
  const calls: Request[] = [];
  const fetchMock = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    const req = input instanceof Request ? input : new Request(new URL(String(input), "http://localhost"), init);
    calls.push(req);
    const url = new URL(req.url);
    const key = `${req.method} ${url.pathname}`;
    const handler = routes[key];
    if (!handler) return new Response(JSON.stringify({ error: { code: "not_found", message: key, fields: {} } }), { status: 404, headers: { "Content-Type": "application/json" } });
    const out = await handler(req);
    if (out instanceof Response) return out;
    return new Response(JSON.stringify(out), { status: 200, headers: { "Content-Type": "application/json" } });
  });
  vi.stubGlobal("fetch", fetchMock);
  return { calls };
}

export const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

export const ME = (role: string) => ({
  user: { id: 1, username: "ada", email: "ada@example.org", first_name: "", last_name: "" },
  tenants: [{ id: "t1", slug: "acme", name: "Acme", role }],
  token: null,
});

export const PROJECTS = {
  next: null,
  previous: null,
  results: [{ id: "p1", tenant_id: "t1", slug: "vision", name: "Vision", description: "", created_at: "", updated_at: "" }],
};
