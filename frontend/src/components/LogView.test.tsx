import { createRef } from "react";
import { describe, expect, it } from "vitest";
import { act, fireEvent, render, screen } from "@testing-library/react";
import { I18nProvider } from "../i18n";
import { LogView, isError, type LogViewHandle } from "./LogView";

describe("LogView", () => {
  it("counts appended lines and finds matches within", async () => {
    const ref = createRef<LogViewHandle>();
    render(
      <I18nProvider lang="en">
        <LogView ref={ref} />
      </I18nProvider>,
    );
    expect(screen.getByText("No log lines yet.")).toBeInTheDocument();
    await act(async () => {
      ref.current!.append(
        Array.from({ length: 5000 }, (_, i) => ({ stream: "stdout", message: `step=${i} loss=${1 / (i + 1)}` })),
      );
      await new Promise((r) => requestAnimationFrame(r));
    });
    expect(screen.getByTestId("log-count")).toHaveTextContent("5000 lines");
    // following: the newest line is drawn, the first is not
    expect(document.querySelector('[data-index="4999"]')).toHaveTextContent("step=4999 ");
    expect(document.querySelector('[data-index="0"]')).toBeNull();
    const search = screen.getByRole("searchbox", { name: "Search in log" });
    await act(async () => {
      fireEvent.change(search, { target: { value: "step=42 " } });
      fireEvent.keyDown(search, { key: "Enter", code: "Enter", keyCode: 13 });
    });
    expect(screen.getByTestId("log-hits")).toHaveTextContent("1/1");
    await act(async () => fireEvent.click(screen.getByRole("button", { name: "next match" })));
    // the match is drawn, highlighted, and following stopped
    expect(document.querySelector('[data-index="42"]')).toHaveClass("hit");
    expect(screen.getByTestId("log-follow")).not.toBeChecked();
    // only the visible rows are in the DOM, never all 5000
    expect(document.querySelectorAll(".log-line").length).toBeLessThan(200);
  });

  it("knows an error line", () => {
    expect(isError({ stream: "stderr", message: "Traceback (most recent call last):" })).toBe(true);
    expect(isError({ stream: "stdout", message: "x", level: "ERROR" })).toBe(true);
    expect(isError({ stream: "stdout", message: "all good" })).toBe(false);
  });
});
