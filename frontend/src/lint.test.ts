// The import rules of eslint.config.js (docs/ui.md) fail on a cycle or a page importing App.tsx,
// naming both files; the sources as they are pass.
import path from "node:path";
import { ESLint } from "eslint";
import { expect, test } from "vitest";

const root = path.resolve(__dirname, "..");
const eslint = new ESLint({ cwd: root });
const messages = async (code: string, file: string) =>
  (await eslint.lintText(code, { filePath: path.join(root, file) }))[0].messages.map((m) => `${m.ruleId}: ${m.message}`);

test("a module that App.tsx imports and that imports App.tsx is a cycle naming both", async () => {
  const got = await messages('import { App } from "./App";\nexport const useProjects = () => App;\n', "src/projects.ts");
  expect(got).toContain("torus/no-cycle: src/projects.ts imports src/App.tsx, which leads back to it");
});

test("a page importing App.tsx is refused, naming both", async () => {
  const got = await messages('import { App } from "../App";\nexport const X = App;\n', "src/pages/Clusters.tsx");
  expect(got.some((m) => m.startsWith("import-x/no-restricted-paths") && m.includes('"../App"') && m.includes("src/App.tsx"))).toBe(true);
});

test("the sources pass", async () => {
  const results = await eslint.lintFiles(["src"]);
  const errors = results.flatMap((r) => r.messages.map((m) => `${path.relative(root, r.filePath)}:${m.line} ${m.ruleId}: ${m.message}`));
  expect(errors).toEqual([]);
}, 120_000);
