"""Two benchmark runs side by side: every figure of either results file with A, B and B/A.

    .venv/bin/python bench/compare.py bench/results/submit-A.json bench/results/submit-B.json
    .venv/bin/python bench/compare.py bench/results/history/serving.json:0 serving-B.json

A results file is what a benchmark writes (bench/_common.py: write_result); FILE:N picks entry
N of a history file (bench/results/history/<benchmark>.json). Needs no services. Not a
benchmark itself: run_all runs only the benchmarks (it skips this one by name).
"""

import argparse
import json
import sys
from pathlib import Path

SECTIONS = ("figures", "peers", "ratios")


def load(spec: str) -> dict:
    """A results file, or entry N of a history file (`path:N`)."""
    path, _, index = spec.rpartition(":") if spec.rpartition(":")[2].isdigit() else (spec, "", "")
    record = json.loads(Path(path).read_text())
    if index:
        record = {"benchmark": record["benchmark"], **record["entries"][int(index)]}
    return record


def rows(a: dict, b: dict) -> list[tuple[str, str, float | None, float | None, float | None]]:
    """(section.name, unit, A, B, B/A) for every figure in either run, A's order first."""
    out = []
    for section in SECTIONS:
        fa, fb = a.get(section, {}), b.get(section, {})
        for name in [*fa, *(n for n in fb if n not in fa)]:
            va = fa.get(name, {}).get("value")
            vb = fb.get(name, {}).get("value")
            unit = (fa.get(name) or fb.get(name)).get("unit", "")
            ratio = round(vb / va, 3) if va not in (None, 0) and vb is not None else None
            out.append((f"{section}.{name}", unit, va, vb, ratio))
    return out


def header(label: str, record: dict) -> str:
    machine = record.get("machine", {})
    load = " ".join(str(x) for x in machine.get("loadavg", []))
    commit = (record.get("commit") or "?")[:10] + ("+" if record.get("dirty") else "")
    command = " ".join(record.get("command", [])) or record.get("title", "")
    when = record.get("when") or record.get("date", "?")
    return (
        f"{label}: {record.get('benchmark')} {when} commit {commit} "
        f"cpus {machine.get('cpus', '?')} load {load or '?'}  {command}"
    )


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def render(a: dict, b: dict) -> str:
    table = rows(a, b)
    width = max([len("figure"), *(len(name) for name, *_ in table)])
    lines = [header("A", a), header("B", b), ""]
    lines.append(f"{'figure':<{width}}  {'unit':<8} {'A':>12} {'B':>12} {'B/A':>8}")
    for name, unit, va, vb, ratio in table:
        lines.append(
            f"{name:<{width}}  {unit:<8} {number(va):>12} {number(vb):>12} {number(ratio):>8}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="results file (or history.json:N)")
    parser.add_argument("b", help="results file (or history.json:N)")
    args = parser.parse_args(argv)
    a, b = load(args.a), load(args.b)
    if a.get("benchmark") != b.get("benchmark"):
        print(f"note: different benchmarks ({a.get('benchmark')} and {b.get('benchmark')})")
    print(render(a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
