"""Run every benchmark in bench/ (each also runs alone); each writes its results file,
bench/results/<benchmark>-<UTC stamp>.json (bench/_common.py: write_result).

Each benchmark script prints its result as one JSON line last:
{"benchmark": ..., "metrics": {...}, "peers": {...}, "ratios": {...}}
"""

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = ("run_all.py", "compare.py")


def main() -> int:
    scripts = sorted(
        p for p in HERE.glob("*.py") if p.name not in NOT_BENCHMARKS and not p.name.startswith("_")
    )
    if not scripts:
        print("no benchmarks yet")
        return 0
    failed = 0
    for script in scripts:
        proc = subprocess.run(  # noqa: S603 (our own scripts)
            [sys.executable, str(script), *sys.argv[1:]], capture_output=True, text=True
        )
        sys.stderr.write(proc.stderr)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode != 0 or not lines:
            print(f"{script.name}: failed (exit {proc.returncode})")
            failed += 1
            continue
        json.loads(lines[-1])  # a result line, or this run fails loudly
        print(lines[-1])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
