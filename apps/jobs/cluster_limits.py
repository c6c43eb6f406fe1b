"""The tenant GPU limits a cluster holds itself, and the idle GPUs lent past them.

A cluster whose config says `"tenant_gpu_quota": "cluster"` (or the older `"slurm"`) enforces
the tenant-wide GPU quota itself (Slurm: the tenant account's GrpTRES=gres/gpu=<limit>;
Kubernetes: the tenant's ClusterQueue and ResourceQuota), so it starts a tenant's jobs the
moment GPUs free up, without the platform's round trip; admission then does not hold jobs for
that one limit (apps/jobs/admission.py).

With `"quota_borrowing": true` as well, the limit is the quota plus a share of the idle GPUs
nobody else's waiting work claims, recomputed at every reconcile pass: a tenant that wants
more than its quota while the cluster has spare GPUs gets them (Kueue's cohort borrowing,
without preemption), and its limit falls back to the quota as soon as others want their
share. Lowering a limit stops new starts; nothing running is taken back (a borrowed job ends
within its time limit). Counted from the platform's own rows, per pass:

- idle = the cluster's GPUs less those of its running jobs;
- each tenant's own claim = its waiting GPUs, up to what its quota has left (all of them
  for a tenant without a quota);
- spare = idle less every tenant's own claim, split among the tenants that want more than
  their claim in proportion to their quotas, none given more than it waits for;
- limit = max(quota, GPUs running) + its share.
"""

import logging

from django.core.cache import cache
from django.db.models import Sum

from apps.jobs.borrowing import cluster_gpus
from apps.jobs.models import Job
from apps.jobs.states import ACTIVE, State
from apps.quotas.models import Quota

# Cluster.config["tenant_gpu_quota"] values by which the cluster holds that limit itself
CLUSTER_ENFORCED = ("cluster", "slurm")
logger = logging.getLogger(__name__)


def enforced_by_cluster(cluster) -> bool:
    return (
        cluster is not None and (cluster.config or {}).get("tenant_gpu_quota") in CLUSTER_ENFORCED
    )


def lending(cluster) -> bool:
    return enforced_by_cluster(cluster) and bool((cluster.config or {}).get("quota_borrowing"))


def _key(cluster_id, tenant_id) -> str:
    return f"torus:tenant-gpu-limit:{cluster_id}:{tenant_id}"


def _lent_key(cluster_id) -> str:
    return f"torus:tenant-gpu-lent:{cluster_id}"


def forget(*, cluster, tenant_ids) -> None:
    """Drop what the cache remembers as set there: the next sync sets every limit again."""
    cache.delete_many([_key(cluster.pk, i) for i in tenant_ids] + [_lent_key(cluster.pk)])


def lent_limits(*, capacity: int, quotas: dict, running: dict, waiting: dict) -> dict:
    """tenant -> GPU limit (None: unlimited) for the tenants in `quotas` (tenant -> GPUs or
    None), given each one's running and waiting GPUs (the module's docstring says how)."""
    idle = capacity - sum(running.values())
    claims, beyond = {}, {}
    for tenant, quota in quotas.items():
        want, held = waiting.get(tenant, 0), running.get(tenant, 0)
        claims[tenant] = want if quota is None else min(want, max(0, quota - held))
        if quota is not None and want > claims[tenant]:
            beyond[tenant] = quota
    spare = max(0, idle - sum(claims.values()))
    need = {t: waiting.get(t, 0) - claims[t] for t in beyond}
    shares = dict.fromkeys(beyond, 0)
    wanting = set(beyond)
    while spare > 0 and wanting:  # in proportion to the quotas, none past its need
        weight = sum(max(1, beyond[t]) for t in wanting)
        given = 0
        for tenant in sorted(wanting, key=str):
            give = min(need[tenant] - shares[tenant], spare * max(1, beyond[tenant]) // weight)
            shares[tenant] += give
            given += give
        if not given:  # rounding left a few: to the one wanting the most
            tenant = max(wanting, key=lambda t: need[t] - shares[t])
            given = min(spare, need[tenant] - shares[tenant])
            shares[tenant] += given
        spare -= given
        wanting = {t for t in wanting if shares[t] < need[t]}
    limits = {}
    for tenant, quota in quotas.items():
        if quota is None or tenant not in shares:
            limits[tenant] = quota
        else:
            limits[tenant] = min(capacity, max(quota, running.get(tenant, 0)) + shares[tenant])
    return limits


def _gpus_by_tenant(cluster) -> tuple[dict, dict]:
    """tenant id -> GPUs of its running jobs on the cluster, and of its admitted ones waiting."""
    running, waiting = {}, {}
    active = (
        Job.objects.filter(cluster_id=cluster.pk, state__in=list(ACTIVE))
        .values("tenant_id", "state")
        .annotate(gpus=Sum("gpus"))
    )
    for row in active:
        into = running if row["state"] == State.RUNNING else waiting
        into[row["tenant_id"]] = into.get(row["tenant_id"], 0) + int(row["gpus"] or 0)
    return running, waiting


def targets(*, cluster, tenant_ids=None) -> tuple[dict, dict]:
    """tenant id -> the GPU limit the cluster should hold for it now (None: unlimited), and
    tenant id -> its quota. Without `tenant_ids`: every tenant with admitted work on the
    cluster, and every one lent to before (whose limit must come back down)."""
    running, waiting = _gpus_by_tenant(cluster)
    with_work = set(running) | set(waiting)
    if tenant_ids is None:
        tenant_ids = with_work | set(cache.get(_lent_key(cluster.pk)) or ())
    counted = set(tenant_ids) | (with_work if lending(cluster) else set())
    quotas = dict.fromkeys(counted)
    quotas.update(
        Quota.objects.filter(tenant_id__in=counted, project=None, user=None).values_list(
            "tenant_id", "gpus"
        )
    )
    limits = quotas
    if lending(cluster):
        limits = lent_limits(
            capacity=cluster_gpus(cluster_id=cluster.pk),
            quotas=quotas,
            running=running,
            waiting=waiting,
        )
    return {tenant_id: limits[tenant_id] for tenant_id in tenant_ids}, quotas


def sync(*, cluster, backend, tenants=None, only_unset: bool = False) -> dict:
    """Give the cluster the limits of `targets` that differ from what was last set there
    (remembered in the cache: a pass calls the cluster only for a change). `tenants`: only
    these (Tenant rows); `only_unset`: only those never set (the dispatcher's first
    submission of a tenant; the reconciler keeps them current). Returns what was set."""
    if not enforced_by_cluster(cluster):
        return {}
    from apps.identity.services import group_name
    from apps.tenancy.models import Tenant

    ids = None if tenants is None else {t.pk for t in tenants}
    if only_unset and ids:
        ids = {i for i in ids if cache.get(_key(cluster.pk, i)) is None}
        if not ids:
            return {}
    wanted, quotas = targets(cluster=cluster, tenant_ids=ids)
    last = cache.get_many([_key(cluster.pk, i) for i in wanted])
    changed = {i: g for i, g in wanted.items() if last.get(_key(cluster.pk, i)) != ("set", g)}
    rows = {t.pk: t for t in Tenant.objects.filter(pk__in=changed)} if changed else {}
    for tenant_id, gpus in changed.items():
        tenant = rows[tenant_id]
        backend.tenant_gpu_limit(tenant=tenant.slug, account=group_name(tenant=tenant), gpus=gpus)
        cache.set(_key(cluster.pk, tenant_id), ("set", gpus), timeout=600)
        logger.info("tenant %s on %s: GPU limit %s", tenant.slug, cluster.name, gpus)
    if tenants is None:  # who is above the quota now: brought back down by a later pass
        lent = [i for i, g in wanted.items() if g != quotas.get(i)]
        cache.set(_lent_key(cluster.pk), lent, timeout=None)
    return changed
