"""No module outside apps/compute/backends/ names a scheduler: Slurm's and Kubernetes' words in
code (names and strings; comments and docstrings may explain by example) live behind the
Backend interface (apps/compute/backends/base.py), save the allow-list's, each with its reason."""

import io
import re
import tokenize
from pathlib import Path

APPS = Path(__file__).resolve().parents[2] / "apps"
BACKENDS = APPS / "compute" / "backends"

WORDS = {
    "squeue": re.compile(r"squeue", re.IGNORECASE),
    "sbatch": re.compile(r"sbatch", re.IGNORECASE),
    "scontrol": re.compile(r"scontrol", re.IGNORECASE),
    "sacct": re.compile(r"sacct", re.IGNORECASE),
    "SLURM_": re.compile(r"SLURM_"),
    "kubernetes": re.compile(r"kubernetes", re.IGNORECASE),
    "Pod": re.compile(r"\bPods?\b"),
    "kubectl": re.compile(r"kubectl", re.IGNORECASE),
}

# names, strings, and the text of f-strings (a token of its own from Python 3.12)
CODE_TOKENS = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}

# (path under apps/, word): why it may stay. Data the platform stores or shows, and the
# programs that stand up the platform's own local clusters, name their backend by design.
ALLOWED = {
    ("compute/models.py", "kubernetes"): "Cluster.Backend's choice: a stored value and its label",
    ("compute/management/commands/cluster_register_local.py", "kubernetes"): (
        "registers the platform's own local Kubernetes cluster (its --backend choice, settings)"
    ),
    ("compute/management/commands/cluster_register_local.py", "SLURM_"): (
        "reads the local Slurm component's env file (SLURM_CONF) into the cluster's config"
    ),
    ("compute/management/commands/kube_watch.py", "kubernetes"): (
        "the Kubernetes backend's watcher process: starts backends.kubernetes.watch per cluster"
    ),
    ("identity/privileged.py", "sbatch"): (
        "the privileged helper's sbatch verb (the helper submits as the user); only the Slurm"
        " backend calls it"
    ),
    ("lifecycle/purge.py", "kubernetes"): (
        "a purge's step names, stored in Purge.steps_done and shown in the API (the objects"
        " go through Backend.objects_remove)"
    ),
}


# tokens that may sit between a statement's end and the next statement's start
_BETWEEN = {tokenize.NL, tokenize.COMMENT}
_STATEMENT_START = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def _docstring_lines(tokens: list[tokenize.TokenInfo]) -> set[int]:
    """Lines of statements that are bare strings (docstrings): prose, not code. Read from the
    tokens, not with ast.parse, which on Python 3.11.2 can raise "AST constructor recursion
    depth mismatch" when an error from another thread lands during the parse (CPython
    gh-106905)."""
    lines: set[int] = set()
    run: list[tokenize.TokenInfo] = []
    at_start = True
    for token in tokens:
        if token.type in _BETWEEN:
            continue
        if token.type == tokenize.STRING and (at_start or run):
            run.append(token)
            at_start = False
            continue
        if run and token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            lines.update(range(run[0].start[0], run[-1].end[0] + 1))
        run = []
        at_start = token.type in _STATEMENT_START
    return lines


def backend_words(path: Path) -> list[tuple[int, str]]:
    """(line, word) for each backend word in the module's names and strings."""
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    prose = _docstring_lines(tokens)
    found = []
    for token in tokens:
        if token.type not in CODE_TOKENS:
            continue
        if token.type != tokenize.NAME and token.start[0] in prose:
            continue
        for word, pattern in WORDS.items():
            if pattern.search(token.string):
                found.append((token.start[0], word))
    return found


def offences(root: Path = APPS) -> list[str]:
    """'path:line: word' for every backend word outside the backends, not allowed."""
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if path.is_relative_to(BACKENDS) or "/migrations/" in f"/{relative}":
            continue
        for line, word in backend_words(path):
            if (relative, word) not in ALLOWED:
                out.append(f"apps/{relative}:{line}: {word}")
    return sorted(set(out))


def test_no_module_outside_the_backends_names_a_scheduler():
    found = offences()
    assert not found, (
        "backend words outside apps/compute/backends/ (put the rule behind a Backend method,"
        " or allow it in ALLOWED with its reason):\n" + "\n".join(found)
    )


def test_every_allowed_word_is_still_there():
    """An allow-list entry whose word left the module goes too (the list stays true)."""
    stale = [
        f"{path}: {word}"
        for path, word in ALLOWED
        if word not in {w for _line, w in backend_words(APPS / path)}
    ]
    assert not stale, stale


def test_a_planted_word_is_found_with_its_file_and_line(tmp_path):
    module = tmp_path / "jobs" / "planted.py"
    module.parent.mkdir()
    module.write_text(
        '"""Waits in squeue (prose: allowed)."""\n'
        "# kubectl in a comment: allowed\n"
        "def conf(env):\n"
        '    """Reads the sbatch environment (prose: allowed)."""\n'
        '    return env["SLURM_CONF"]\n'
        "KIND = 'Pod'\n"
        "'scontrol'.split()\n"
    )
    assert offences(tmp_path) == [
        "apps/jobs/planted.py:5: SLURM_",
        "apps/jobs/planted.py:6: Pod",
        "apps/jobs/planted.py:7: scontrol",
    ]
