// The current tenant's projects (GET /api/v1/projects/), shared by the shell's switcher and the pages.
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "./api/client";
import { useSession } from "./session";

export function useProjects() {
  const { tenant } = useSession();
  return useQuery({
    queryKey: ["projects", tenant?.id],
    enabled: !!tenant,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/projects/", { params: { query: { tenant: tenant!.id, page_size: 500 } } }))
        .results,
  });
}
