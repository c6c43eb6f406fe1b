"""The one reader of tenants' trees (apps/identity/tree.py): nothing below a trusted root is
reached through a link, whichever way it is opened (openat2, or the walk by hand where the
kernel or a seccomp filter has no openat2), each refusal beside an allowed control."""

import errno
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from apps.identity import tree
from apps.identity.tree import TreeRefused


@pytest.fixture(params=["openat2", "fallback-enosys", "fallback-eperm"])
def mode(request, monkeypatch):
    """Every test runs with openat2, and with the component walk (ENOSYS: no such system
    call; EPERM: a seccomp filter refuses it)."""
    if request.param != "openat2":
        code = errno.ENOSYS if request.param == "fallback-enosys" else errno.EPERM
        monkeypatch.setattr(tree, "_openat2", lambda *_a: -code)
        monkeypatch.setattr(tree, "_openat2_missing", False)
    return request.param


@pytest.fixture
def world(tmp_path):
    """Two tenants' trees under one root, and a secret of the machine outside it."""
    root = tmp_path / "jobs"
    acme = root / "acme" / "vision" / "jobs" / "j1"
    globex = root / "globex" / "nlp" / "jobs" / "j2"
    for job in (acme, globex):
        (job / "model" / "sub").mkdir(parents=True)
        (job / "model" / "w.bin").write_bytes(b"w" * 3000)
        (job / "model" / "sub" / "c.json").write_text("{}")
    (globex / "attempt-1").mkdir()
    (globex / "attempt-1" / "stdout.log").write_text("globex secret line\n")
    secret = tmp_path / "etc" / "ssh"
    secret.mkdir(parents=True)
    (secret / "ssh_host_key").write_text("machine secret")
    return root, acme, globex, secret


def test_a_link_anywhere_below_the_root_is_refused(world, mode):
    root, acme, globex, secret = world
    (acme / "x").symlink_to("/")
    (acme / "other").symlink_to(globex)
    (acme / "model" / "up").symlink_to(secret)
    # the allowed control: a real subdirectory, and a regular file
    with tree.opened(root, acme / "model" / "sub", directory=True) as fd:
        assert sorted(os.listdir(fd)) == ["c.json"]
    assert tree.read_small(root, acme / "model" / "sub" / "c.json", limit=10) == b"{}"
    cases = [
        (acme / "x" / "etc" / "ssh", True, acme / "x"),  # the exploit: x -> /
        (acme / "x", True, acme / "x"),  # the link itself
        (acme / "other" / "attempt-1" / "stdout.log", False, acme / "other"),  # another tenant
        (acme / "model" / "up" / "ssh_host_key", False, acme / "model" / "up"),
    ]
    for path, directory, culprit in cases:
        with pytest.raises(TreeRefused) as refused:
            tree.open_under(root, path, directory=directory)
        assert refused.value.path == str(culprit), (mode, path)
        assert "symbolic link" in str(refused.value)


def test_dot_dot_absolute_and_outside_paths_are_refused(world, mode):
    root, acme, globex, _ = world
    relative = str(acme.relative_to(root))
    fd = tree.open_beneath(root, f"{relative}/model", directory=True)  # the control
    os.close(fd)
    for bad in (f"{relative}/../../../../etc", "/etc", "a\x00b"):
        with pytest.raises(TreeRefused):
            tree.open_beneath(root, bad, directory=True)
    for outside in ("/etc/passwd", f"{root}-other/x", f"{acme}/../../../../../etc/passwd"):
        with pytest.raises(TreeRefused):
            tree.open_under(root, outside)
    # a tenant's root as the root: the other tenant's tree is outside it
    with pytest.raises(TreeRefused):
        tree.open_under(root / "acme", globex / "attempt-1" / "stdout.log")
    assert tree.read_small(root / "globex", globex / "attempt-1" / "stdout.log", limit=99)


def test_kinds_and_missing_entries(world, mode):
    root, acme, _, _ = world
    os.mkfifo(acme / "fifo")
    with pytest.raises(TreeRefused, match="not a regular file"):
        tree.open_under(root, acme / "fifo")  # opened without blocking, then refused
    with pytest.raises(IsADirectoryError):
        tree.open_under(root, acme / "model")
    with pytest.raises(NotADirectoryError):
        tree.open_under(root, acme / "model" / "w.bin" / "x", directory=True)
    with pytest.raises(FileNotFoundError):
        tree.open_under(root, acme / "nothing" / "here")
    with tree.opened(root, acme / "model" / "w.bin") as fd:
        assert os.fstat(fd).st_size == 3000


def test_small_reads_ranges_and_tails(world, mode):
    root, acme, _, _ = world
    path = acme / "model" / "w.bin"
    with pytest.raises(TreeRefused, match="more than 100 bytes"):
        tree.read_small(root, path, limit=100)
    assert tree.read_small(root, path, limit=3000) == b"w" * 3000
    assert tree.read_range(root, path, offset=2990, limit=100) == b"w" * 10
    assert tree.read_tail(root, path, max_bytes=5) == b"w" * 5
    assert tree.file_size(root, path) == 3000


def test_walk_refuses_or_skips_links_per_caller(world, mode):
    root, acme, globex, _ = world
    (acme / "model" / "sub" / "leak").symlink_to(globex / "attempt-1")
    (acme / "model" / "file-link").symlink_to(globex / "attempt-1" / "stdout.log")
    with tree.opened(root, acme / "model", directory=True) as top:
        with pytest.raises(TreeRefused) as refused:
            list(tree.walk_files(top, links="refuse"))
        assert refused.value.path == "file-link"
        skipped = [f.relative for f in tree.walk_files(top, links="skip")]
    assert skipped == ["sub/c.json", "w.bin"]  # nothing of the other tenant
    (acme / "model" / "file-link").unlink()
    with tree.opened(root, acme / "model", directory=True) as top:
        with pytest.raises(TreeRefused) as refused:
            list(tree.walk_files(top, links="refuse"))
        assert refused.value.path == "sub/leak"


def test_copy_tree_hashes_and_refuses_what_it_must(world, mode):
    root, acme, globex, _ = world
    stored: dict[str, bytes] = {}

    def store(relative, chunks):
        stored[relative] = b"".join(chunks)

    with tree.opened(root, acme / "model", directory=True) as top:
        copied = tree.copy_tree(top, store=store)
    assert stored == {"sub/c.json": b"{}", "w.bin": b"w" * 3000}
    assert {c.relative: (c.size, c.sha256) for c in copied} == {
        "sub/c.json": (2, hashlib.sha256(b"{}").hexdigest()),
        "w.bin": (3000, hashlib.sha256(b"w" * 3000).hexdigest()),
    }
    with tree.opened(root, acme / "model", directory=True) as top:
        with pytest.raises(TreeRefused, match="more than 1 files"):
            tree.copy_tree(top, store=store, max_files=1)
        with pytest.raises(TreeRefused, match=r"w\.bin takes the tree over 100 bytes"):
            tree.copy_tree(top, store=store, max_bytes=100)
        with pytest.raises(TreeRefused, match="bad name"):
            tree.copy_tree(top, store=store, path_problem=lambda p: "bad name" * ("." in p))
    os.link(globex / "attempt-1" / "stdout.log", acme / "model" / "hard")
    stored.clear()
    with (
        tree.opened(root, acme / "model", directory=True) as top,
        pytest.raises(TreeRefused, match="hard links"),
    ):
        tree.copy_tree(top, store=store)
    assert b"globex secret line\n" not in stored.values()


def test_a_link_swapped_in_while_walking_is_not_followed(world, mode):
    """Between the listing and the open, a directory becomes a link: the open refuses it."""
    root, acme, globex, _ = world
    with tree.opened(root, acme / "model", directory=True) as top:
        walk = tree.walk_files(top, links="refuse")
        first = next(walk)  # sub/c.json: the walk stands in sub/
        assert first.relative == "sub/c.json"
        os.rename(acme / "model" / "sub", acme / "model" / "sub.old")
        os.rename(acme / "model" / "w.bin", acme / "w.bin.old")
        (acme / "model" / "w.bin").symlink_to(globex / "attempt-1" / "stdout.log")
        second = next(walk)  # listed as a regular file before the swap
        with pytest.raises(TreeRefused, match="symbolic link"):
            second.open()


def test_made_by_a_job_uid_and_read_as_an_unprivileged_one(_job_root, mode):
    """The tree as a job's uid leaves it (setpriv), read by another unprivileged uid (the
    platform's account after issue 33): the link is refused, the real directory read."""
    root = _job_root
    root.mkdir(mode=0o755)
    job = root / "job"
    job.mkdir()
    os.chown(job, 250001, 250001)
    script = "ln -s / x && mkdir -p real && echo ok > real/f"
    subprocess.run(
        ["setpriv", "--reuid=250001", "--regid=250001", "--clear-groups", "sh", "-c", script],
        cwd=job,
        check=True,
    )
    reader = Path(tree.__file__).read_text() + (
        "\nimport sys\n"
        "print(read_small(sys.argv[1], sys.argv[2], limit=10).decode().strip())\n"
        "try:\n    open_under(sys.argv[1], sys.argv[3], directory=True)\n"
        "except TreeRefused as exc:\n    print('refused', exc.path)\n"
    )
    argv = [str(root), str(job / "real/f"), str(job / "x/etc")]
    out = subprocess.run(
        [
            "setpriv",
            "--reuid=250002",
            "--regid=250002",
            "--clear-groups",
            "/usr/bin/python3",
            "-",
            *argv,
        ],
        input=reader,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[:2] == ["ok", f"refused {job / 'x'}"]
