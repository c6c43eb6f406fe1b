import { describe, expect, it } from "vitest";
import { roleAllows } from "./session";

describe("role matrix (generated from apps/tenancy/policies.py)", () => {
  it("lets members run jobs and viewers only read", () => {
    expect(roleAllows("member", "job", "create")).toBe(true);
    expect(roleAllows("viewer", "job", "create")).toBe(false);
    expect(roleAllows("viewer", "job", "read")).toBe(true);
    expect(roleAllows("member", "audit-event", "read")).toBe(false);
    expect(roleAllows("owner", "quota", "update")).toBe(true);
    expect(roleAllows(null, "job", "read")).toBe(false);
    expect(roleAllows("admin", "no-such", "thing")).toBe(false);
  });
});
