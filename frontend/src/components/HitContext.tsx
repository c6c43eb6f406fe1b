// The lines around one search hit (GET /api/v1/logs/context/?id=…), shown on the job page.
import { Card } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { ErrorState, Loading } from "./common";

export function HitContext({ id }: { id: string }) {
  const ctx = useQuery({
    queryKey: ["log-context", id],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/logs/context/", { params: { query: { id, before: 20, after: 20 } } })),
  });
  if (ctx.isLoading) return <Loading />;
  if (ctx.error) return <ErrorState error={ctx.error} />;
  const d = ctx.data!;
  return (
    <Card size="small" title={`#${d.hit.attempt_number} ${d.hit.stream} @ ${d.hit.offset}`} style={{ marginBottom: 8 }} data-testid="hit-context">
      <div className="log-view" style={{ maxHeight: 300, overflow: "auto" }}>
        {[...d.before, d.hit, ...d.after].map((l) => (
          <div key={l.id} className={`log-line${l.id === d.hit.id ? " hit" : ""}`}>
            {l.message}
          </div>
        ))}
      </div>
    </Card>
  );
}
