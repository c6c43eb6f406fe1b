import { describe, expect, it } from "vitest";
import { act, render, screen } from "@testing-library/react";
import { I18nProvider, dictionaries, initialLang, useI18n } from "./i18n";

function Probe() {
  const { t, setLang } = useI18n();
  return (
    <button onClick={() => setLang("zh")} type="button">
      {t("nav.jobs")}
    </button>
  );
}

describe("i18n", () => {
  it("has every English key in Chinese", () => {
    const missing = Object.keys(dictionaries.en).filter((k) => !(dictionaries.zh as Record<string, string>)[k]);
    expect(missing).toEqual([]);
  });

  it("switches language and remembers it", async () => {
    render(
      <I18nProvider lang="en">
        <Probe />
      </I18nProvider>,
    );
    expect(screen.getByRole("button")).toHaveTextContent("Jobs");
    await act(async () => screen.getByRole("button").click());
    expect(screen.getByRole("button")).toHaveTextContent("作业");
    expect(localStorage.getItem("torus.lang")).toBe("zh");
    expect(initialLang()).toBe("zh");
  });
});
