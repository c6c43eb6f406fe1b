"""The per-tenant file tree on the storage the compute nodes share (docs/security.md):

    <job root>/                          root:root        0755
      <tenant>/                          root:t-<tenant>  2750  + ACL platform user r-x
        <project>/                       root:p-<t>_<p>   3770  + ACL (and default ACL) r-x;
                                                                sticky: members add entries but
                                                                cannot rename jobs/, datasets/,
                                                                models/ (or put a link there)
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
import stat
from pathlib import Path

from django.conf import settings

from apps.identity import privileged
from apps.tenancy.models import Project, Tenant


class StorageError(Exception):
    """The tree could not be made as it must be (the filesystem refused, a path is taken by
    something else): nothing was submitted; the dispatcher tries again on a later pass."""


class OlderOwner(StorageError):
    """A directory an older tenant or project left at the path: only an operator's purge
    frees it, so the job is held with this reason rather than tried again in silence."""


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


def _make(dirs: list[privileged.Directory]) -> None:
    """The directories, in order, in one request to the privileged helper: made from the
    root's descriptor one component at a time, owners and modes set on descriptors."""
    try:
        privileged.directories_make(dirs=dirs)
    except privileged.HelperError as exc:
        raise StorageError(str(exc)) from exc


def _older_owner(path: Path, gid: int, what: str) -> None:
    """Refuse a directory an older tenant or project left at this path (its group is not
    this one's): taking it over would hand the old files to the new owner."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot examine {path}: {exc.strerror}") from exc
    # root's own group: never an older tenant's or project's (theirs carry their group), but
    # made by root: the helper cut short before handing it over, or an operator; put right
    by_root = info.st_uid == 0 and info.st_gid == 0
    if stat.S_ISDIR(info.st_mode) and (info.st_gid == gid or by_root):
        return
    raise OlderOwner(f"an older {what}'s directory is still at {path}; an operator must purge it")


def project_tree_ensure(*, project: Project, tenant_gid: int, project_gid: int) -> Path:
    """The tenant's and the project's directories, made once with their groups and ACLs. A
    directory left at either path by an older tenant or project (another group) is refused,
    never taken over (StorageError)."""
    platform = _platform_uid()
    tenant_dir, project_dir = tenant_root(project.tenant), project_root(project)
    _older_owner(tenant_dir, tenant_gid, "tenant")
    _older_owner(project_dir, project_gid, "project")
    # owners, modes and ACLs are set every time: a directory someone made another way is
    # put right before a job relies on it
    Dir = privileged.Directory
    dirs = [
        Dir(settings.TORUS_JOB_ROOT, 0, 0, 0o755),
        Dir(str(tenant_dir), 0, tenant_gid, 0o2750, platform_acl=True, enforce=True),
        *(
            Dir(str(path), 0, project_gid, mode, platform_acl=True, default_acl=True, enforce=True)
            for path, mode in ((project_dir, 0o3770), (project_dir / "jobs", 0o2750))
        ),
        # datasets and model files: written by the platform account, read by the project's jobs
        *(
            Dir(str(project_dir / name), platform, project_gid, 0o2750, enforce=True)
            for name in ("datasets", "models")
        ),
    ]
    _make(dirs)
    return project_dir


def job_tree_ensure(*, job_dir: Path, attempt_dir: Path, checkpoint_dir: Path, uid: int, gid: int):
    """A job's directory, its checkpoints and this attempt's log directory, owned by the
    job's user: checkpoints, outputs and log files alike (one request to the helper)."""
    _make(
        [
            privileged.Directory(str(path), uid, gid, 0o2750)
            for path in (job_dir, checkpoint_dir, attempt_dir)
        ]
    )


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
