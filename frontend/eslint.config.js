// ESLint: the frontend's import structure (docs/ui.md). No import cycle, and no page imports
// from src/App.tsx (the shell imports the pages, never the other way round); the hooks rules.
import fs from "node:fs";
import path from "node:path";
import js from "@eslint/js";
import tseslint from "typescript-eslint";
import importX from "eslint-plugin-import-x";
import reactHooks from "eslint-plugin-react-hooks";
import { createTypeScriptImportResolver } from "eslint-import-resolver-typescript";

const here = import.meta.dirname;
const rel = (file) => path.relative(here, file);
const source = (file) => [".tsx", ".ts", "/index.tsx", "/index.ts"].map((x) => file + x).find(fs.existsSync) ?? file;

// import-x's no-cycle, its message naming both files: the importer and what it imports.
const cycle = importX.rules["no-cycle"];
const noCycle = {
  ...cycle,
  meta: { ...cycle.meta, messages: { cycle: "{{from}} imports {{to}}, which leads back to it{{via}}" } },
  create(context) {
    const report = (d) => {
      const spec = d.node.source?.value ?? "?";
      const to = spec.startsWith(".") ? rel(source(path.resolve(path.dirname(context.filename), spec))) : spec;
      const via = d.data?.source ? ` (via ${d.data.source})` : "";
      context.report({ node: d.node, messageId: "cycle", data: { from: rel(context.filename), to, via } });
    };
    return cycle.create(Object.create(context, { report: { value: report } }));
  },
};

export default tseslint.config(
  { ignores: ["dist/**", "node_modules/**", "e2e/**", "e2e-output/**", "src/api/schema.d.ts"] },
  {
    files: ["src/**/*.{ts,tsx}"],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    plugins: { "import-x": importX, "react-hooks": reactHooks, torus: { rules: { "no-cycle": noCycle } } },
    settings: {
      "import-x/extensions": [".ts", ".tsx", ".js"],
      "import-x/parsers": { "@typescript-eslint/parser": [".ts", ".tsx"] },
      "import-x/resolver-next": [createTypeScriptImportResolver({ project: "./tsconfig.json" })],
    },
    rules: {
      "torus/no-cycle": ["error", { ignoreExternal: true }],
      "import-x/no-restricted-paths": [
        "error",
        {
          zones: [
            {
              target: "./src/pages",
              from: "./src/App.tsx",
              message: "a page imports src/App.tsx; move what it needs into a module of its own.",
            },
          ],
        },
      ],
      "react-hooks/rules-of-hooks": "error",
      "react-hooks/exhaustive-deps": "error",
    },
  },
);
