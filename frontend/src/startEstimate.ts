// A waiting job's expected start in words: "starts in ~12 min (5-30)", or why it cannot start
// (apps/jobs/estimates.py computes it each control pass).
import type { components } from "./api/schema";
import type { Key } from "./i18n";

type Expected = components["schemas"]["ExpectedStart"];
type T = (key: Key) => string;

function span(seconds: number, t: T): [number, string] {
  const minutes = Math.max(0, seconds) / 60;
  if (minutes < 90) return [Math.max(1, Math.round(minutes)), t("start.min")];
  if (minutes < 48 * 60) return [Math.round(minutes / 60), t("start.h")];
  return [Math.round(minutes / 1440), t("start.d")];
}

/** "starts in ~12 min (5-30)"; the range in the unit of its late end; null when not waiting. */
export function startsIn(expected: Expected | null | undefined, now: number, t: T): string | null {
  if (!expected) return null;
  if (expected.cannot_start) return t("start.cannot").replace("{reason}", expected.cannot_start);
  if (!expected.p10 || !expected.p50 || !expected.p90) return null;
  const away = (iso: string) => (Date.parse(iso) - now) / 1000;
  if (away(expected.p90) < 60) return t("start.soon");
  const [p50, unit] = span(away(expected.p50), t);
  const [, lateUnit] = span(away(expected.p90), t);
  const inUnit = (iso: string) => {
    const per = lateUnit === t("start.min") ? 60 : lateUnit === t("start.h") ? 3600 : 86400;
    return Math.round(Math.max(0, away(iso)) / per);
  };
  return t("start.in")
    .replace("{p50}", `${p50} ${unit}`)
    .replace("{range}", `${inUnit(expected.p10)}-${inUnit(expected.p90)} ${lateUnit}`);
}
