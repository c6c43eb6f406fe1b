"""The benchmarks' results files: bench/_common.py's write_result writes the command line, the
commit, the machine and the figures with units, and bench/compare.py prints two runs side by
side with B/A (no services needed)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from _common import write_result  # noqa: E402 (bench/ on the path first)

WHEN = time.mktime((2026, 12, 6, 12, 0, 0, 0, 0, 0)) - time.timezone  # 12:00:00 UTC


def result(*, p50: float, rate: float, web_cpu: float) -> dict:
    return {
        "benchmark": "demo",
        "metrics": {
            "submit_ms": {"p50": p50, "p95": p50 * 2},
            "torus_jobs_per_second": rate,
            "cpu_ms_per_job": {"web": web_cpu, "worker": 1.5},
            "filesystem": "not a number",
            "rounds": [1.0, 2.0],
        },
        "peers": {"sbatch_jobs_per_second": 50.0},
        "ratios": {"torus_vs_sbatch": round(50.0 / rate, 2)},
    }


def test_write_result_writes_the_command_commit_machine_and_figures(tmp_path):
    first = result(p50=12.5, rate=40.0, web_cpu=3.5)
    argv = [str(ROOT / "bench" / "demo.py"), "--quick"]
    path = write_result(first, directory=tmp_path, argv=argv, when=WHEN)

    assert path == tmp_path / "demo-20261206T120000Z.json"
    record = json.loads(path.read_text())
    assert record["benchmark"] == "demo"
    assert record["when"] == "2026-12-06T12:00:00Z"
    assert record["command"] == ["bench/demo.py", "--quick"]  # no machine path
    assert re.fullmatch(r"[0-9a-f]{40}", record["commit"])
    assert isinstance(record["dirty"], bool)
    assert record["machine"]["cpus"] == os.cpu_count()
    assert len(record["machine"]["loadavg"]) == 3
    assert record["figures"]["submit_ms.p50"] == {"value": 12.5, "unit": "ms"}
    assert record["figures"]["submit_ms.p95"] == {"value": 25.0, "unit": "ms"}
    assert record["figures"]["torus_jobs_per_second"] == {"value": 40.0, "unit": "jobs/s"}
    assert "filesystem" not in record["figures"] and "rounds" not in record["figures"]
    assert record["peers"] == {"sbatch_jobs_per_second": {"value": 50.0, "unit": "jobs/s"}}
    assert record["ratios"] == {"torus_vs_sbatch": {"value": 1.25, "unit": "x"}}
    assert record["cpu_per_op"] == {
        "cpu_ms_per_job.web": {"value": 3.5, "unit": "ms/job"},
        "cpu_ms_per_job.worker": {"value": 1.5, "unit": "ms/job"},
    }
    assert record["result"] == first  # the benchmark's own line, whole


def compare(*specs: str) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compare.py"), *specs],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def figure_line(output: str, name: str) -> list[str]:
    for line in output.splitlines():
        if line.split()[:1] == [name]:
            return line.split()
    raise AssertionError(f"no line for {name} in:\n{output}")


def test_compare_prints_both_runs_and_the_ratio(tmp_path):
    a = write_result(result(p50=12.5, rate=40.0, web_cpu=3.5), directory=tmp_path / "a")
    b = write_result(result(p50=25.0, rate=50.0, web_cpu=2.8), directory=tmp_path / "b")

    output = compare(str(a), str(b))

    assert output.startswith("A: demo ")
    assert figure_line(output, "figures.submit_ms.p50") == [
        "figures.submit_ms.p50", "ms", "12.5", "25", "2",
    ]  # fmt: skip
    assert figure_line(output, "figures.torus_jobs_per_second")[2:] == ["40", "50", "1.25"]
    assert figure_line(output, "figures.cpu_ms_per_job.web")[1:] == ["ms/job", "3.5", "2.8", "0.8"]
    assert figure_line(output, "ratios.torus_vs_sbatch")[1:] == ["x", "1.25", "1", "0.8"]


def test_compare_reads_a_history_entry_and_marks_what_one_side_lacks(tmp_path):
    history = tmp_path / "demo.json"
    figures = {
        "old_only_ms": {"value": 4, "unit": "ms"},
        "submit_ms.p50": {"value": 10, "unit": "ms"},
    }
    entry = {"title": "an earlier run", "date": "2026-12-01", "issue": 12, "figures": figures}
    history.write_text(json.dumps({"benchmark": "demo", "entries": [entry]}))
    b = write_result(result(p50=25.0, rate=50.0, web_cpu=2.8), directory=tmp_path)

    output = compare(f"{history}:0", str(b))

    assert figure_line(output, "figures.submit_ms.p50")[2:] == ["10", "25", "2.5"]
    assert figure_line(output, "figures.old_only_ms")[2:] == ["4", "-", "-"]
    assert figure_line(output, "figures.torus_jobs_per_second")[2:] == ["-", "50", "-"]


def test_every_history_file_is_data():
    """bench/results/history/<benchmark>.json: entries of figures (numbers with units)."""
    files = sorted((ROOT / "bench" / "results" / "history").glob("*.json"))
    assert files
    for path in files:
        history = json.loads(path.read_text())
        assert history["benchmark"] == path.stem
        assert history["entries"], path
        for entry in history["entries"]:
            assert entry["title"]
            for figure in entry.get("figures", {}).values():
                assert isinstance(figure["value"], int | float), (path, figure)
                assert isinstance(figure["unit"], str)
