"""README.md's shell blocks, run as written: each in order in a fresh `bash -euo pipefail`
(an environment without TORUS_SECRET_KEY or any other TORUS_ variable) from the checkout's
root, against the platform `make up` started (the real platform database, not the tests'):
the first job, the DDP example followed with `logs -f`, its metrics, a log search, a dataset
upload, a model registered from a local directory, its deployment and `torus chat`. A block
that fails names its index, its first line and the tail of its output."""

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
# What the README's blocks write in the checkout (git ignores them); removed afterwards.
MADE = ("hello.yaml", "train.yaml", "data", "tiny")
# The blocks that are the caller itself: `make up` runs first (below), `make test` runs this.
SKIP = {"make up", "make test"}
# The whole README takes 76-163 s here; a block this long is stuck, and says where.
BLOCK_TIMEOUT = 900

pytestmark = [pytest.mark.serial, pytest.mark.readme]


def blocks(text: str) -> list[str]:
    return [m.group(1) for m in BLOCK.finditer(text)]


def commands(block: str) -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in block.splitlines())
    return {line for line in lines if line}


def fresh_env() -> dict:
    """A login shell's environment, none of this process's settings."""
    keep = ("HOME", "LANG", "TERM", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return {**env, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def run(script: str, *, timeout: int) -> subprocess.CompletedProcess:
    """The script in a session of its own: one that runs past `timeout` is killed with all it
    started, and its output so far is returned with exit code None."""
    with subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=fresh_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, _ = process.communicate(timeout=timeout)
            code = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, _ = process.communicate()
            code = None
    return subprocess.CompletedProcess(script, code, out)


def builds_tail() -> str:
    """The end of the background builds' log: a block that waits on a build says why."""
    log = ROOT / ".var" / "log" / "builds.log"
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    except OSError:
        return "(no .var/log/builds.log)"


def test_the_blocks_of_the_readme_parse():
    found = blocks((ROOT / "README.md").read_text())
    assert commands(found[0]) == SKIP  # the caller's; the rest run below
    assert any("torus chat" in b for b in found) and not any("<" in b and "id>" in b for b in found)


def test_every_block_of_the_readme_runs_as_written():
    up = run("make up", timeout=3600)
    assert up.returncode == 0, f"make up failed:\n{up.stdout[-4000:]}"
    try:
        for index, block in enumerate(blocks((ROOT / "README.md").read_text())):
            if commands(block) <= SKIP:
                continue
            done = run(block, timeout=BLOCK_TIMEOUT)
            if done.returncode != 0:
                first = block.strip().splitlines()[0]
                how = (
                    f"ran past {BLOCK_TIMEOUT} s"
                    if done.returncode is None
                    else f"exited {done.returncode}"
                )
                pytest.fail(
                    f"README block {index} ({first!r}) {how}:\n{done.stdout[-4000:]}\n"
                    f"--- the end of .var/log/builds.log:\n{builds_tail()}",
                    pytrace=False,
                )
    finally:
        for name in MADE:
            path = ROOT / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
