"""Apps import in one direction: jobs -> quotas. Quotas answer "what is used, what is allowed"
and never reach into jobs (admission, which drives jobs, lives in apps/jobs/admission.py)."""

import ast
from pathlib import Path

QUOTAS = Path(__file__).resolve().parents[2] / "apps" / "quotas"


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_quotas_never_import_jobs():
    sources = sorted(QUOTAS.rglob("*.py"))
    assert len(sources) >= 5  # models, services, selectors, api views, ...
    offenders = {
        str(path.relative_to(QUOTAS)): sorted(
            name for name in _imported_modules(path) if name.startswith("apps.jobs")
        )
        for path in sources
    }
    assert {path: names for path, names in offenders.items() if names} == {}
    for path in sources:  # nor through a string (importlib, lazy import)
        assert "apps.jobs" not in path.read_text(), path


def test_admission_lives_in_jobs():
    assert not (QUOTAS / "admission.py").exists()
    from apps.jobs import admission

    assert callable(admission.admit_tenant)
