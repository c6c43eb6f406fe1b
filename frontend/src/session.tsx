// Who is signed in (GET /api/v1/auth/me), the chosen tenant and project (remembered), and
// what the role may do (the role matrix generated from apps/tenancy/policies.py).
import { createContext, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, session as sessionHooks, unwrap, type Schemas } from "./api/client";
import policy from "./api/policy.json";

export type TenantRef = { id: string; slug: string; name: string; role: string | null };

type Ctx = {
  me: Schemas["Me"] | null;
  loading: boolean;
  tenants: TenantRef[];
  tenant: TenantRef | null;
  setTenant: (id: string) => void;
  project: string | null; // project id, or null for all
  setProject: (id: string | null) => void;
  can: (resource: string, action: string) => boolean;
  refresh: () => void;
};

const SessionCtx = createContext<Ctx | null>(null);

const ranks = policy.ranks as Record<string, number>;
const matrix = policy.matrix as Record<string, string>;

/** May a person with `role` do (resource, action)? The same matrix the API enforces. */
export function roleAllows(role: string | null | undefined, resource: string, action: string) {
  const needed = matrix[`${resource}:${action}`];
  if (!role || !needed) return false;
  return (ranks[role] ?? 0) >= (ranks[needed] ?? 99);
}

export function SessionProvider({ children }: { children: ReactNode }) {
  const qc = useQueryClient();
  const meQuery = useQuery({
    queryKey: ["me"],
    retry: false,
    queryFn: async () => {
      const res = await api.GET("/api/v1/auth/me");
      if (res.response.status === 401 || res.response.status === 403) return null;
      return unwrap(res);
    },
  });
  const me = meQuery.data ?? null;
  const tenants = useMemo(() => (me?.tenants ?? []) as TenantRef[], [me]);
  const [tenantId, setTenantId] = useState<string | null>(localStorage.getItem("torus.tenant"));
  const [project, setProjectState] = useState<string | null>(localStorage.getItem("torus.project"));
  const tenant = tenants.find((t) => t.id === tenantId) ?? tenants[0] ?? null;

  useEffect(() => {
    sessionHooks.onExpired = () => {
      // said once on the sign-in page; only when someone was signed in
      if (qc.getQueryData(["me"])) sessionStorage.setItem("torus.expired", "1");
      qc.setQueryData(["me"], null);
    };
  }, [qc]);

  const value: Ctx = {
    me,
    loading: meQuery.isLoading,
    tenants,
    tenant,
    setTenant: (id) => {
      localStorage.setItem("torus.tenant", id);
      localStorage.removeItem("torus.project");
      setTenantId(id);
      setProjectState(null);
    },
    project,
    setProject: (id) => {
      if (id) localStorage.setItem("torus.project", id);
      else localStorage.removeItem("torus.project");
      setProjectState(id);
    },
    can: (resource, action) => roleAllows(tenant?.role, resource, action),
    refresh: () => qc.invalidateQueries({ queryKey: ["me"] }),
  };
  return <SessionCtx.Provider value={value}>{children}</SessionCtx.Provider>;
}

export function useSession(): Ctx {
  const ctx = useContext(SessionCtx);
  if (!ctx) throw new Error("useSession outside SessionProvider");
  return ctx;
}
