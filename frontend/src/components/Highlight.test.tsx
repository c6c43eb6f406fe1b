import { describe, expect, it } from "vitest";
import { render } from "@testing-library/react";
import { Highlight } from "./Highlight";

describe("Highlight", () => {
  it("marks the matches and never renders the line as HTML", () => {
    const { container } = render(
      <Highlight html={"loss &lt;img src=x onerror=alert(1)&gt; <mark>NaN</mark> at step"} text="" />,
    );
    expect(container.querySelector("mark")?.textContent).toBe("NaN");
    expect(container.querySelector("img")).toBeNull();
    expect(container.textContent).toBe("loss <img src=x onerror=alert(1)> NaN at step");
  });
});
