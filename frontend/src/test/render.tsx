// The whole app at a path, with a fresh query cache, as the page tests render it.
import { render } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { App } from "../App";
import type { Lang } from "../i18n";
import { AppProviders, makeQueryClient } from "../providers";

export function renderAt(path: string, lang: Lang = "en") {
  return render(
    <MemoryRouter initialEntries={[path]}>
      <AppProviders client={makeQueryClient()} lang={lang}>
        <App />
      </AppProviders>
    </MemoryRouter>,
  );
}
