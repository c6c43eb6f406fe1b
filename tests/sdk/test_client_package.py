"""The client stands alone: torus-client (client/) built as a wheel and installed into a clean
virtualenv with none of the server's packages; login, profiles and completion from there,
against a live portal over real HTTP."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from apps.tenancy.models import Role

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = {"django", "celery", "psycopg", "elasticsearch", "uvicorn", "channels", "kubernetes"}
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("client")
    src = tmp / "src"
    shutil.copytree(ROOT / "client", src, ignore=shutil.ignore_patterns("*.egg-info", "build"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("torus_client-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    install = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", wheel],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    return venv


def torus(venv: Path, *args: str, config: Path, stdin: str | None = None, **env: str):
    return subprocess.run(
        [venv / "bin" / "torus", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        cwd="/",
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(config.parent),
            "TORUS_CONFIG": str(config),
            **env,
        },
    )


def test_the_installed_client_has_none_of_the_server(client_venv):
    listed = subprocess.run(
        [client_venv / "bin" / "python", "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {p["name"].lower().split("[")[0] for p in json.loads(listed.stdout)}
    assert "torus-client" in names
    assert not names & SERVER_ONLY, names & SERVER_ONLY
    probe = subprocess.run(
        [client_venv / "bin" / "python", "-c", "import torus, torus.cli; print(torus.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).is_relative_to(client_venv)


def test_the_client_keeps_to_the_oldest_python_it_declares():
    """Python 3.9 is not installed here: vermin reads the code for what each line needs."""
    checked = subprocess.run(
        [
            Path(sys.executable).parent / "vermin",
            "--no-tips",
            "--violations",
            "--eval-annotations",
            "-t=3.9-",
            ROOT / "client" / "torus",
        ],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    declared = (ROOT / "client" / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.9"' in declared


def test_login_checks_the_token_then_saves_a_private_profile(
    client_venv, asgi_server, acme, globex, tmp_path
):
    config = tmp_path / "torus" / "config.toml"
    bad = torus(
        client_venv, "login", "--url", asgi_server.url, "--token", "tor_nope", config=config
    )
    assert bad.returncode == 1 and bad.stderr.startswith("torus: ")
    assert "Traceback" not in bad.stderr and not config.exists()  # nothing saved

    made = torus(
        client_venv,
        "login",
        "--url",
        asgi_server.url,
        "--token",
        acme.tokens[Role.MEMBER],
        config=config,
    )
    assert made.returncode == 0, made.stderr
    assert "signed in as acme-member" in made.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    who = torus(client_venv, "whoami", config=config)
    assert who.returncode == 0 and who.stdout.startswith("acme-member at "), who.stderr

    # a second platform, its token piped in; the first stays the default
    piped = torus(
        client_venv,
        "login",
        "--profile",
        "other",
        "--url",
        asgi_server.url,
        config=config,
        stdin=globex.tokens[Role.OWNER] + "\n",
    )
    assert piped.returncode == 0, piped.stderr
    assert torus(client_venv, "whoami", config=config).stdout.startswith("acme-member")
    other = torus(client_venv, "--profile", "other", "whoami", config=config)
    assert other.stdout.startswith("globex-owner"), other.stderr
    by_env = torus(client_venv, "whoami", config=config, TORUS_PROFILE="other")
    assert by_env.stdout.startswith("globex-owner"), by_env.stderr
    listed = json.loads(torus(client_venv, "--json", "profiles", config=config).stdout)
    assert [(p["name"], p["default"], p["token"]) for p in listed] == [
        ("default", "*", "saved"),
        ("other", "", "saved"),
    ]
    assert globex.tokens[Role.OWNER] not in torus(client_venv, "profiles", config=config).stdout

    missing = torus(client_venv, "--profile", "nowhere", "whoami", config=config)
    assert missing.returncode == 1 and "no profile 'nowhere'" in missing.stderr
    bad_name = torus(
        client_venv,
        "login",
        "--profile",
        "../x",
        "--url",
        asgi_server.url,
        "--token",
        "t",
        config=config,
    )
    assert bad_name.returncode == 1 and "profile name" in bad_name.stderr

    assert torus(client_venv, "logout", "--profile", "other", config=config).returncode == 0
    gone = torus(client_venv, "--profile", "other", "whoami", config=config)
    assert gone.returncode == 1 and "Traceback" not in gone.stderr
    assert acme.tokens[Role.MEMBER] in config.read_text()  # the other profile kept


def test_bash_completes_commands_subcommands_and_options(client_venv, tmp_path):
    config = tmp_path / "config.toml"
    script = torus(client_venv, "completion", "bash", config=config)
    assert script.returncode == 0, script.stderr

    def complete(*words: str) -> set[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = (
            f"{script.stdout}\nCOMP_WORDS=(torus {line}); COMP_CWORD={len(words)}; "
            '_torus_complete; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return set(done.stdout.split())

    assert {"jobs", "login", "profiles", "deploy"} <= complete("")
    assert complete("lo") == {"login", "logout", "logs"}
    assert complete("datasets", "up") == {"upload"}
    assert "--project" in complete("datasets", "upload", "--")
    assert "--profile" in complete("--")
