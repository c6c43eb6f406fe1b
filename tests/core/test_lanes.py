"""The parallel lane's grouping (tests/conftest.py): tests of one xdist_group run on one worker,
in a real pytest-xdist session (pytest 9.2 broke it silently: Slurm tests then ran side by
side and slurmdbd crashed)."""

import subprocess
import sys
import textwrap

GROUPED = """
    import os, pathlib, pytest

    def mark(kind, n):
        worker = os.environ["PYTEST_XDIST_WORKER"]
        (pathlib.Path(__file__).parent / "seen" / f"{kind}-{n}-{worker}").touch()

    @pytest.mark.parametrize("n", range(8))
    @pytest.mark.xdist_group("slurm")
    def test_grouped(n):
        mark("grouped", n)

    @pytest.mark.parametrize("n", range(8))
    def test_free(n):
        mark("free", n)
"""


def test_tests_of_one_group_run_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent(GROUPED))
    (tmp_path / "seen").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-p", "no:django", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = [name.split("-") for name in sorted(p.name for p in (tmp_path / "seen").iterdir())]
    assert len(seen) == 16
    assert len({worker for kind, _, worker in seen if kind == "grouped"}) == 1, seen
