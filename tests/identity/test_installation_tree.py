"""An earlier installation's tenant trees under the data dir are moved aside, not inherited:
the real platform/services/lib.sh functions the helper's start runs (torus_installation_id,
torus_claim_tree), on trees made here."""

import subprocess
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "platform" / "services" / "lib.sh"


def claim(var: Path, root: Path, *, new: bool) -> str:
    """Run the helper's claim on `root` for the installation whose .var is `var`; its log."""
    script = (
        f'source "{LIB}"; id=$(torus_installation_id); torus_claim_tree "{root}" "$id" {int(new)}'
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={"PATH": "/usr/bin:/bin", "TORUS_VAR_DIR": str(var)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stderr


def tree(root: Path) -> Path:
    (root / "acme" / "vision").mkdir(parents=True)
    (root / "acme" / "vision" / "ckpt.pt").write_text("old")
    return root


def aside(root: Path) -> list[Path]:
    return sorted(root.parent.glob(f"{root.name}.earlier-*"))


def test_a_tree_of_another_installation_is_moved_aside_whole(tmp_path):
    first, second = tmp_path / "var1", tmp_path / "var2"
    first.mkdir(), second.mkdir()
    root = tmp_path / "data" / "jobs"
    claim(first, root, new=True)  # the first installation's tree, marked
    tree(root)
    log = claim(second, root, new=True)
    [moved] = aside(root)
    assert (moved / "acme" / "vision" / "ckpt.pt").read_text() == "old"  # nothing deleted
    assert "held an earlier installation's tree" in log and str(moved) in log
    assert not root.exists()  # the helper makes it again, empty
    mark = Path(f"{root}.torus-installation").read_text().strip()
    assert (
        mark
        == (second / "installation-id").read_text().strip()
        != (first / "installation-id").read_text().strip()
    )


def test_an_unmarked_tree_found_by_a_new_installation_is_moved_aside(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    root = tree(tmp_path / "data" / "jobs")  # left by an installation before ids were kept
    log = claim(var, root, new=True)
    assert len(aside(root)) == 1 and "(no id)" in log


def test_an_unmarked_tree_of_an_installation_that_ran_before_stays(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    root = tree(tmp_path / "data" / "jobs")
    assert claim(var, root, new=False) == ""
    assert (root / "acme" / "vision" / "ckpt.pt").exists() and not aside(root)
    claim(var, root, new=True)  # marked now: its own tree stays even after the log is gone
    assert (root / "acme" / "vision" / "ckpt.pt").exists() and not aside(root)


def test_another_id_is_moved_aside_even_in_an_installation_that_ran_before(tmp_path):
    first, second = tmp_path / "var1", tmp_path / "var2"
    first.mkdir(), second.mkdir()
    root = tmp_path / "data" / "dataset-cache"
    claim(first, root, new=False)
    tree(root)
    claim(second, root, new=False)
    assert len(aside(root)) == 1 and not root.exists()
