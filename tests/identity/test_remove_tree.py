"""The helper's `remove-tree` verb (a purge's files): a directory below a root removed with all
it holds, walked from the root's descriptor, never through a link; each refusal beside an
allowed removal, nothing outside the tree touched."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from apps.identity import privileged
from tests.identity.own_helper import own_helper  # noqa: F401  (fixture)

UID = settings.TORUS_UID_RANGE[1] - 7
GID = settings.TORUS_GID_RANGE[1] - 7


@pytest.fixture
def root(_job_root, own_helper) -> Path:  # noqa: F811
    privileged.directory_make(path=_job_root, uid=0, gid=0, mode=0o755)
    return _job_root


@pytest.fixture
def canary():
    """A directory outside every helper root that nothing may change."""
    path = Path(tempfile.mkdtemp(prefix="torus-canary-", dir="/tmp"))
    (path / "keep").write_text("x")
    (path / "sub").mkdir()
    (path / "sub" / "keep").write_text("y")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def user_tree(top: Path, canary: Path) -> None:
    """What a job leaves: its user's files and directories, read-only ones, and links to
    what lies outside (a file, a directory)."""
    (top / "jobs" / "j1" / "checkpoints").mkdir(parents=True)
    (top / "jobs" / "j1" / "checkpoints" / "step-1.pt").write_bytes(b"weights")
    (top / "jobs" / "j1" / "out.log").write_text("line\n")
    (top / "jobs" / "j1" / "to-file").symlink_to(canary / "keep")
    (top / "jobs" / "j1" / "to-dir").symlink_to(canary / "sub")
    os.mkfifo(top / "jobs" / "fifo")
    locked = top / "jobs" / "locked"
    locked.mkdir()
    (locked / "f").write_text("z")
    for path in [top, *top.rglob("*")]:
        os.lchown(path, UID, GID)
    os.chmod(locked, 0o500)


def test_a_tree_is_removed_and_its_links_never_followed(root, canary):
    top = root / "acme" / "vision"
    top.mkdir(parents=True)
    user_tree(top, canary)
    assert privileged.tree_remove(path=top) is True
    assert not top.exists() and (root / "acme").is_dir()
    assert (canary / "keep").read_text() == "x" and (canary / "sub" / "keep").read_text() == "y"
    # again: already gone is success
    assert privileged.tree_remove(path=top) is False
    assert privileged.tree_remove(path=root / "nobody" / "nothing") is False


def test_a_deep_tree_is_removed(root):
    top = root / "deep"
    path = top
    for _ in range(400):
        path = path / "d"
    path.mkdir(parents=True)
    (path / "f").write_text("x")
    assert privileged.tree_remove(path=top) is True
    assert not top.exists()


def test_a_path_that_is_a_link_is_refused_and_the_target_kept(root, canary):
    (root / "acme").mkdir()
    (root / "acme" / "vision").symlink_to(canary)
    with pytest.raises(privileged.HelperRefused, match="link or not a directory"):
        privileged.tree_remove(path=root / "acme" / "vision")
    assert (canary / "keep").exists() and (root / "acme" / "vision").is_symlink()
    # a link as a component above: refused too
    with pytest.raises(privileged.HelperRefused, match="link or not a directory"):
        privileged.tree_remove(path=root / "acme" / "vision" / "sub")
    assert (canary / "sub" / "keep").exists()
    # the allowed control of the same kind: a real directory beside it
    (root / "acme" / "real").mkdir()
    assert privileged.tree_remove(path=root / "acme" / "real") is True


def test_a_root_itself_or_a_path_outside_the_roots_is_refused(root, canary):
    with pytest.raises(privileged.HelperRefused, match="root itself"):
        privileged.tree_remove(path=Path(settings.DATA_DIR) / "test-jobs")
    with pytest.raises(privileged.HelperRefused, match="outside the helper's roots"):
        privileged.tree_remove(path=canary)
    with pytest.raises(privileged.HelperRefused, match="normal path"):
        privileged.tree_remove(path=f"{root}/a/../b")
    assert (canary / "keep").exists()
