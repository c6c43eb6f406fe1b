// What the deployments pages share: the state tag, the usage query and the role a person has
// in a deployment's tenant.
import { Tag } from "antd";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../../api/client";
import { roleAllows, useSession } from "../../session";
import { STATE_COLORS, type Deployment, type Usage } from "./types";

export function DeploymentStateTag({ state, testId = "deployment-state" }: { state: string; testId?: string }) {
  return (
    <Tag color={STATE_COLORS[state] ?? "default"} data-testid={testId}>
      {state}
    </Tag>
  );
}

/** GET .../usage/?minutes= (the gateway's per-minute records), refreshed every `every` ms. */
export function useUsage(id: string | undefined, minutes: number, every = 15_000) {
  return useQuery({
    queryKey: ["deployment-usage", id, minutes],
    enabled: !!id,
    refetchInterval: every,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/deployments/{id}/usage/", {
          params: { path: { id: id! }, query: { minutes } },
        }),
      ) as unknown as Usage,
  });
}

/** May the signed-in person do `action` on deployments of this deployment's tenant? */
export function useDeploymentRole(d: Deployment | undefined) {
  const { tenants } = useSession();
  const role = tenants.find((x) => x.id === d?.tenant)?.role ?? null;
  return (action: string) => roleAllows(role, "deployment", action);
}
