"""The apps' layers (pyproject.toml [tool.importlinter], docs/ARCHITECTURE.md): the contracts keep,
a broken one names its rule and both modules, and no app reaches a higher one by a model name."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# apps.get_model("jobs", "Job"), get_model("jobs.Job"), get_model(app_label="jobs", ...), and
# importlib.import_module("apps.jobs...")
BY_NAME_RE = re.compile(
    r"""(?:get_model\(\s*(?:app_label\s*=\s*)?["']|import_module\(\s*["']apps\.)([a-z_]+)"""
)


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _app_layers() -> dict[str, int]:
    """{app label: its layer's rank, 0 the lowest}, from the apps' layers contract."""
    (contract,) = [c for c in _config()["contracts"] if c["id"] == "layers"]
    ranks = {}
    for rank, layer in enumerate(reversed(contract["layers"])):
        for app in re.split(r"[|:]", layer):
            ranks[app.strip()] = rank
    return ranks


def _lint_imports(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_keep():
    result = _lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_broken_contract_names_the_rule_and_both_modules(tmp_path):
    """core above tenancy (the other way round): tenancy's imports of core break it."""
    (contract,) = [c for c in _config()["contracts"] if c["id"] == "layers"]
    lines = ["[importlinter]", "root_packages =", "    apps", "    config", ""]
    lines += [
        "[importlinter:contract:layers]",
        f"name = {contract['name']}",
        "type = layers",
        "containers = apps",
        "layers =",
        "    core",
        "    tenancy",
    ]
    path = tmp_path / "contracts.ini"
    path.write_text("\n".join(lines) + "\n")
    result = _lint_imports(path)
    assert result.returncode != 0
    assert f"{contract['name']} BROKEN" in result.stdout
    assert "apps.tenancy is not allowed to import apps.core" in result.stdout
    assert re.search(r"- apps\.tenancy\.\S+ -> apps\.core\.\S+ \(l\.\d+", result.stdout)


def test_no_app_names_a_higher_app():
    """apps.get_model() and import_module() hide an import from the contracts: they may name
    only the app's own layer or a lower one (a higher app registers a hook instead, as jobs
    does in quotas)."""
    ranks = _app_layers()
    assert len(ranks) >= 12
    offenders = []
    for path in sorted((ROOT / "apps").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        app = path.relative_to(ROOT / "apps").parts[0]
        for named in BY_NAME_RE.findall(path.read_text()):
            if ranks.get(named, -1) > ranks[app]:
                offenders.append(f"{path.relative_to(ROOT)} names {named}")
    assert offenders == []


def test_the_pattern_sees_each_spelling():
    calls = (
        'get_model("jobs", "Job") apps.get_model("jobs.JobAttempt") get_model(app_label="jobs")'
        " import_module('apps.jobs.tasks') get_model(self.label)"
    )
    assert BY_NAME_RE.findall(calls) == ["jobs", "jobs", "jobs", "jobs"]
