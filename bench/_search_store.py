"""bench/search.py's stores: the database rows and the Elasticsearch indices."""

import hashlib
import json
import re
import time
from datetime import datetime

from _common import ensure_tenant
from _search_data import (
    GEN_VERSION,
    INDEX_RE,
    JOBS,
    OTHER_OWNER,
    OTHER_SLUG,
    OWNER,
    PROJECTS,
    RETENTION_DAYS,
    TENANT_SLUG,
    TOKEN_NAME,
    documents,
    log,
    place_in_time,
    plan_jobs,
)

# -- database rows: tenants, projects, jobs, attempts -------------------------------------------


def ensure_rows(seed: int, lines: dict[str, int]) -> dict:
    """Both tenants with their projects, and one Job row (+ attempts) per planned job; ids
    are looked up by name, so a rerun finds the same rows (and the same document ids)."""
    from apps.jobs.models import Job, JobAttempt
    from apps.jobs.spec import JobSpecSerializer, normalise, totals
    from apps.tenancy.models import Project, Tenant

    main = ensure_tenant(
        slug=TENANT_SLUG, project_slug=PROJECTS[TENANT_SLUG][0], owner=OWNER, token_name=TOKEN_NAME
    )
    other = ensure_tenant(
        slug=OTHER_SLUG,
        project_slug=PROJECTS[OTHER_SLUG][0],
        owner=OTHER_OWNER,
        token_name=f"{TOKEN_NAME}-other",
    )
    Tenant.objects.filter(slug__in=[TENANT_SLUG, OTHER_SLUG]).update(
        log_retention_days=RETENTION_DAYS
    )
    out = {"main": main, "other": other, "plans": {}}
    for ctx, slug in ((main, TENANT_SLUG), (other, OTHER_SLUG)):
        tenant = ctx["tenant"]
        projects = {}
        for project_slug in PROJECTS[slug]:
            project, _ = Project.objects.get_or_create(
                tenant=tenant, slug=project_slug, defaults={"name": f"Benchmark {project_slug}"}
            )
            projects[project_slug] = project
        plans = plan_jobs(seed, slug, max(1, min(JOBS[slug], lines[slug] // 1000)), lines[slug])
        existing = {}
        for job in Job.objects.filter(tenant=tenant).order_by("created_at"):
            existing.setdefault(job.name, job)
        for plan in plans:
            project = projects[plan.project]
            row = existing.get(plan.name)
            if row is None:
                data = {
                    "project": str(project.id),
                    "name": plan.name,
                    "command": ["python", "train.py"],
                    "resources": {"nodes": plan.gpus // 8, "gpus_per_node": 8},
                }
                serializer = JobSpecSerializer(data=data)
                serializer.is_valid(raise_exception=True)
                spec = normalise(dict(serializer.validated_data))
                row = Job.objects.create(
                    tenant=tenant,
                    project=project,
                    user=ctx["user"],
                    name=plan.name,
                    spec=spec,
                    state=plan.state,
                    cluster=ctx["cluster"],
                    priority=spec["priority"],
                    labels=spec["labels"],
                    **totals(spec),
                )
            elif row.project_id != project.id or row.state != plan.state:
                Job.objects.filter(pk=row.pk).update(project=project, state=plan.state)
            plan.id, plan.project_id = str(row.pk), str(project.id)
            attempts = {a.number: a for a in JobAttempt.objects.filter(job_id=row.pk)}
            for attempt in plan.attempts:
                found = attempts.get(attempt.number)
                if found is None:
                    found = JobAttempt.objects.create(
                        job_id=row.pk,
                        number=attempt.number,
                        state=attempt.state,
                        nodes=attempt.nodes,
                    )
                elif found.state != attempt.state or found.nodes != attempt.nodes:
                    JobAttempt.objects.filter(pk=found.pk).update(
                        state=attempt.state, nodes=attempt.nodes
                    )
                attempt.id = str(found.pk)
            JobAttempt.objects.filter(job_id=row.pk, number__gt=len(plan.attempts)).delete()
        out["plans"][slug] = plans
        ctx["projects"] = projects
    return out


def signature(seed: int, lines: dict[str, int], rows: dict) -> str:
    """What the stored documents depend on: a different value means reload."""
    parts = {
        "version": GEN_VERSION,
        "seed": seed,
        "lines": lines,
        "tenants": [str(rows["main"]["tenant"].id), str(rows["other"]["tenant"].id)],
        "attempts": sorted(
            f"{job.project_id}/{job.id}/{a.id}"
            for plans in rows["plans"].values()
            for job in plans
            for a in job.attempts
        ),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


# -- Elasticsearch: our indices, loading, reuse -------------------------------------------------


def wait_es(es, timeout: float = 300) -> None:
    """Until Elasticsearch answers (a test suite sharing the machine may restart it)."""
    from elasticsearch import ApiError, TransportError

    deadline = time.monotonic() + timeout
    while True:
        try:
            es.cluster.health(wait_for_status="yellow", timeout="30s")
            return
        except (ApiError, TransportError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Elasticsearch did not answer for {timeout:.0f} s") from exc
            log(f"waiting for Elasticsearch ({type(exc).__name__})")
            time.sleep(5)


def our_indices(es) -> list[str]:
    names = es.indices.get(
        index="torus-logs-bench-search-*", allow_no_indices=True, ignore_unavailable=True
    )
    return sorted(name for name in names if INDEX_RE.match(name))


def drop_indices(es) -> list[str]:
    names = our_indices(es)
    for name in names:  # by full name: action.destructive_requires_name refuses wildcards
        es.indices.delete(index=name)
    return names


def stored_set(es, sig: str, lines: dict[str, int]) -> dict | None:
    """The meta of the stored data set when the indices hold exactly it, else None."""
    names = our_indices(es)
    if not names:
        return None
    mappings = es.indices.get_mapping(index=",".join(names))
    metas = [mappings[name]["mappings"].get("_meta", {}).get("torus_bench") for name in names]
    if any(not meta or meta.get("signature") != sig for meta in metas):
        return None
    es.indices.refresh(index=",".join(names))
    per_tenant = dict.fromkeys(lines, 0)
    for name, meta in zip(names, metas, strict=True):
        count = es.count(index=name)["count"]
        if count != meta["docs"]:
            return None
        per_tenant[meta["tenant"]] = per_tenant.get(meta["tenant"], 0) + count
    if per_tenant != lines:
        return None
    return metas[0]


def load(es, seed: int, rows: dict, anchor: datetime, sig: str) -> dict:
    """Delete our indices, then index every document (parallel bulk, deterministic ids)."""
    from elasticsearch import helpers

    from apps.logs.index import template_install

    dropped = drop_indices(es)
    if dropped:
        log(f"deleted {len(dropped)} stale bench indices")
    template_install()
    per_index: dict[str, int] = {}
    started = time.monotonic()
    last = started
    done = 0
    bulk_client = es.options(request_timeout=300)

    def actions():
        for ctx, slug in ((rows["main"], TENANT_SLUG), (rows["other"], OTHER_SLUG)):
            plans = rows["plans"][slug]
            place_in_time(plans, anchor)
            for action in documents(seed, ctx["tenant"], plans):
                per_index[action["_index"]] = per_index.get(action["_index"], 0) + 1
                yield action

    for ok, item in helpers.parallel_bulk(
        bulk_client, actions(), thread_count=2, chunk_size=2000, queue_size=4
    ):
        if not ok:
            raise RuntimeError(f"bulk item failed: {item}")
        done += 1
        now = time.monotonic()
        if now - last >= 15:
            log(f"  loaded {done:,} documents ({done / (now - started):,.0f}/s)")
            last = now
    indexed_s = time.monotonic() - started
    names = sorted(per_index)
    es.indices.refresh(index=",".join(names))
    seconds = time.monotonic() - started
    for name in names:
        tenant = OTHER_SLUG if name.startswith(f"torus-logs-{OTHER_SLUG}-") else TENANT_SLUG
        meta = {
            "signature": sig,
            "tenant": tenant,
            "docs": per_index[name],
            "anchor": anchor.isoformat(),
            "seed": seed,
        }
        es.indices.put_mapping(index=name, meta={"torus_bench": meta})
    log(f"loaded {done:,} documents into {len(names)} indices in {seconds:.1f} s")
    return {
        "reused": False,
        "documents": done,
        "seconds": round(seconds, 1),
        "bulk_seconds": round(indexed_s, 1),
        "docs_per_second": round(done / seconds),
    }


def index_sizes(es) -> dict:
    rows = es.cat.indices(
        index=",".join(our_indices(es)), format="json", bytes="b", h="index,docs.count,store.size"
    ).body
    out = {}
    for slug in (TENANT_SLUG, OTHER_SLUG):
        mine = [r for r in rows if re.match(rf"^torus-logs-{slug}-\d", r["index"])]
        out[slug] = {
            "indices": len(mine),
            "docs": sum(int(r["docs.count"]) for r in mine),
            "store_mb": round(sum(int(r["store.size"]) for r in mine) / 2**20, 1),
        }
    return out
