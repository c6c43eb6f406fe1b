import { describe, expect, it } from "vitest";
import type { Key } from "./i18n";
import { en } from "./locales/en";
import { startsIn } from "./startEstimate";

const t = (k: Key) => en[k];
const now = Date.parse("2026-12-07T12:00:00Z");
const at = (seconds: number) => new Date(now + seconds * 1000).toISOString();
const expected = (p10: number, p50: number, p90: number) => ({
  p10: at(p10),
  p50: at(p50),
  p90: at(p90),
  computed_at: at(0),
  basis: "",
  cannot_start: "",
});

describe("startsIn", () => {
  it("gives the likely start and the range in the late end's unit", () => {
    expect(startsIn(expected(300, 720, 1800), now, t)).toBe("starts in ~12 min (5-30 min)");
    expect(startsIn(expected(1800, 7200, 4 * 3600), now, t)).toBe("starts in ~2 h (1-4 h)");
    expect(startsIn(expected(86400, 3 * 86400, 6 * 86400), now, t)).toBe("starts in ~3 d (1-6 d)");
  });

  it("says soon, or why it cannot start, or nothing for a job that is not waiting", () => {
    expect(startsIn(expected(0, 10, 30), now, t)).toBe("starts within a minute");
    const blocked = { ...expected(0, 0, 0), p10: null, p50: null, p90: null, cannot_start: "tenant acme allows 2 GPUs; this job needs 4" };
    expect(startsIn(blocked, now, t)).toBe("cannot start: tenant acme allows 2 GPUs; this job needs 4");
    expect(startsIn(null, now, t)).toBeNull();
  });
});
