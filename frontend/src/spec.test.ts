import { describe, expect, it } from "vitest";
import { asCli, asCurl, fromSpec, fromYaml, toSpec, toYaml } from "./spec";

describe("job spec", () => {
  it("turns the form into the API's spec and back", () => {
    const spec = toSpec({
      name: "train",
      project: "p1",
      kind: "training",
      command: "python\ntrain.py\n--steps\n10",
      env: "A=1\nB=x=y",
      nodes: 2,
      gpus_per_node: 1,
      memory: "4096",
      time_limit: "00:10:00",
      env_type: "none",
      launcher: "torchrun",
    });
    expect(spec).toEqual({
      project: "p1",
      name: "train",
      kind: "training",
      command: ["python", "train.py", "--steps", "10"],
      env: { A: "1", B: "x=y" },
      resources: { nodes: 2, gpus_per_node: 1, memory: 4096, time_limit: "00:10:00" },
      distributed: { launcher: "torchrun" },
    });
    const back = fromSpec(fromYaml(toYaml(spec)) as never);
    expect(back.command).toBe("python\ntrain.py\n--steps\n10");
    expect(back.env).toBe("A=1\nB=x=y");
    expect(back.launcher).toBe("torchrun");
  });

  it("keeps secret names and env values that name a secret through the form", () => {
    const spec = { name: "a", command: "true", secrets: ["HF_TOKEN"], env: { A: "1", WANDB_API_KEY: { secret: "WB" } } };
    const form = fromSpec(spec as never);
    expect(form.env).toBe("A=1"); // no "[object Object]" in the KEY=value text
    expect(form.secrets).toEqual(["HF_TOKEN"]);
    expect(toSpec(form)).toMatchObject({ secrets: ["HF_TOKEN"], env: { A: "1", WANDB_API_KEY: { secret: "WB" } } });
    const plain = toSpec({ name: "a", kind: "training", command: "true", secrets: [] });
    expect("secrets" in plain || "env" in plain).toBe(false);
  });

  it("names a cluster only when one is chosen", () => {
    expect(toSpec({ name: "a", kind: "training", command: "true", cluster: "local-k8s" }).cluster).toBe("local-k8s");
    expect("cluster" in toSpec({ name: "a", kind: "training", command: "true", cluster: "" })).toBe(false);
    expect(fromSpec({ name: "a", command: "true", cluster: "local-k8s" } as never).cluster).toBe("local-k8s");
  });

  it("keeps a one-line command a shell string", () => {
    expect(toSpec({ name: "a", kind: "training", command: "echo hi && sleep 1" }).command).toBe("echo hi && sleep 1");
  });

  it("copies as CLI and as a curl line that survives quotes", () => {
    const spec = toSpec({ name: "it's", kind: "training", command: "echo 'x'" });
    expect(asCli(spec)).toContain("torus submit - <<'EOF'");
    const curl = asCurl(spec, "https://torus.example");
    expect(curl).toContain("'https://torus.example/api/v1/jobs/'");
    // the JSON body, single-quoted for the shell, with each ' written as '\''
    expect(curl).toContain(`"name":"it'\\''s"`);
  });
});
