"""platform/ holds no Python, so the standard library's `platform` module is never shadowed."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_platform_folder_has_no_python_files():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "platform").rglob("*.py")]
    assert offenders == []


def test_stdlib_platform_imports_from_the_repo_root():
    result = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.system())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Linux"
