"""The per-tenant file tree on the storage the compute nodes share (docs/security.md):

    <job root>/                          root:root        0755
      <tenant>/                          root:t-<tenant>  2750  + ACL platform user r-x
        <project>/                       root:p-<t>_<p>   2770  + ACL (and default ACL) r-x
          jobs/                          root:p-<t>_<p>   2750
            <job id>/                    <user>:p-...     2750  checkpoints/, attempt-N/
          datasets/, models/             torus:p-<t>_<p>  2750  written by the platform
                                                                (apps/datasets/storage)

Other tenants' people cannot traverse a tenant's directory; inside it, files created by jobs
take the project's group (setgid directories), and the platform's unprivileged account
(the log shipper) reads them through the inherited ACL entry, never as root.
"""

import os
import pwd
import subprocess
from pathlib import Path

from django.conf import settings

from apps.tenancy.models import Project, Tenant


class StorageError(Exception):
    """The tree could not be made as it must be (the filesystem refused, a path is taken by
    something else): nothing was submitted; the dispatcher tries again on a later pass."""


def tenant_root(tenant: Tenant) -> Path:
    return Path(settings.TORUS_JOB_ROOT) / tenant.slug


def project_root(project: Project) -> Path:
    return tenant_root(project.tenant) / project.slug


def _platform_uid() -> int:
    try:
        return pwd.getpwnam(settings.TORUS_SERVICE_USER).pw_uid
    except KeyError as exc:
        raise StorageError(
            f"the platform's account {settings.TORUS_SERVICE_USER!r} does not exist "
            "(platform/services/up creates it)"
        ) from exc


def _setfacl(path: Path, spec: str) -> None:
    result = subprocess.run(  # noqa: S603 (argv list; the spec names only the platform's uid)
        ["setfacl", "-m", spec, str(path)],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if result.returncode != 0:
        raise StorageError(f"setfacl on {path}: {result.stderr.strip()}")


def _half_made(path: Path, *, uid: int) -> bool:
    """Made by us (mode 0700, our uid) but never handed to `uid`: a dispatcher killed between
    the mkdir and the chown. Finished now, or the job could not write to it. (The
    permission bits only: under a setgid parent the new directory has the bit too.)"""
    st = path.lstat()
    return st.st_uid == os.geteuid() != uid and st.st_mode & 0o777 == 0o700


def _directory(path: Path, *, uid: int, gid: int, mode: int, enforce: bool = False) -> None:
    """Create path (not its parents) owned uid:gid with mode. An existing directory keeps
    what it has unless `enforce`; a symlink or anything but a directory there is refused."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if path.is_symlink() or not path.is_dir():
            raise StorageError(f"{path} exists and is not a directory") from None
        if not enforce and not _half_made(path, uid=uid):
            return
    except OSError as exc:
        raise StorageError(f"cannot make {path}: {exc.strerror}") from exc
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)


def project_tree_ensure(*, project: Project, tenant_gid: int, project_gid: int) -> Path:
    """The tenant's and the project's directories, made once with their groups and ACLs."""
    root = Path(settings.TORUS_JOB_ROOT)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot make the job root {root}: {exc.strerror}") from exc
    platform = _platform_uid()
    tenant_dir, project_dir = tenant_root(project.tenant), project_root(project)
    # owners, modes and ACLs are set every time: a directory someone made another way is
    # put right before a job relies on it
    for path, gid, mode, acl in (
        (tenant_dir, tenant_gid, 0o2750, f"u:{platform}:r-x"),
        (project_dir, project_gid, 0o2770, f"u:{platform}:r-x,d:u:{platform}:r-X"),
        (project_dir / "jobs", project_gid, 0o2750, f"u:{platform}:r-x,d:u:{platform}:r-X"),
    ):
        _directory(path, uid=0, gid=gid, mode=mode, enforce=True)
        _setfacl(path, acl)
    # datasets and model files: written by the platform account, read by the project's jobs
    for name in ("datasets", "models"):
        _directory(project_dir / name, uid=platform, gid=project_gid, mode=0o2750, enforce=True)
    return project_dir


def job_tree_ensure(*, job_dir: Path, attempt_dir: Path, checkpoint_dir: Path, uid: int, gid: int):
    """A job's directory, its checkpoints and this attempt's log directory, owned by the
    job's user: checkpoints, outputs and log files alike."""
    for path in (job_dir, checkpoint_dir, attempt_dir):
        _directory(path, uid=uid, gid=gid, mode=0o2750)


def allowed_roots(tenant: Tenant) -> list[Path]:
    return [tenant_root(tenant), *(Path(p) for p in settings.TORUS_SHARED_ROOTS)]


def path_problem(path: str, *, tenant: Tenant) -> str | None:
    """Why a path a job names (working_dir, environment path) is not allowed, or None.

    It must be absolute, without '.' or '..' parts, inside the tenant's tree or a site-wide
    read-only root, and where it exists already it must resolve (symlinks followed) inside
    the same root. The job runs as its user, so the kernel refuses the rest; this check
    gives the clear 400 first."""
    roots = allowed_roots(tenant)
    where = ", ".join(str(r) for r in roots)
    if not path.startswith("/"):
        return "Must be an absolute path."
    parts = path.split("/")
    if any(part in (".", "..") for part in parts):
        return "Must not contain '.' or '..' parts."
    candidate = Path(path)
    root = next((r for r in roots if candidate == r or r in candidate.parents), None)
    if root is None:
        return f"Must lie in your tenant's tree or a shared read-only root ({where})."
    real = Path(os.path.realpath(candidate))
    real_root = Path(os.path.realpath(root))
    if real != real_root and real_root not in real.parents:
        return f"Resolves (through a symlink) outside {root}."
    return None
