"""Log search and context on the real Elasticsearch: text, filters, pages, histogram, context,
and every way we could think of to reach another tenant's lines.

Tenant B's slug is tenant A's slug plus "-x", so A's index pattern (torus-logs-<a>-*) also
matches B's indices: only the tenant filter in the selector keeps B's lines out.
"""

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from elasticsearch import helpers
from rest_framework.test import APIClient

from apps.logs.es import client, index_name, index_pattern
from apps.logs.index import template_install
from apps.logs.search import encode_cursor
from apps.tenancy.models import Role
from tests.conftest import make_world
from tests.factories import ProjectFactory, make_job

pytestmark = pytest.mark.django_db

SEARCH = "/api/v1/logs/search/"
CONTEXT = "/api/v1/logs/context/"
T0 = datetime(2025, 3, 1, 23, 58, tzinfo=UTC)  # lines cross midnight: two daily indices


@pytest.fixture(scope="module")
def _template():
    template_install()


def ship(indices: set, world, attempt, stream: str, lines: list[dict]) -> list[str]:
    """Index lines the way the shipper does (ids, fields, daily index); their ids."""
    docs, offset = [], 0
    for i, line in enumerate(lines):
        when = line.get("timestamp", T0 + timedelta(seconds=i))
        name = index_name(world.tenant.slug, when)
        indices.add(name)
        source = {
            "tenant": str(world.tenant.id),
            "project": str(attempt.job.project_id),
            "job": str(attempt.job_id),
            "attempt": str(attempt.id),
            "attempt_number": attempt.number,
            "stream": stream,
            "node": line.get("node", "n1"),
            "offset": offset,
            "timestamp": when.isoformat(),
            "message": line["message"],
            "truncated": False,
        }
        for key in ("rank", "level"):
            if key in line:
                source[key] = line[key]
        docs.append({"_index": name, "_id": f"{attempt.id}:{stream}:{offset}", **source})
        offset += len(line["message"].encode()) + 1
    helpers.bulk(client(), docs, refresh=True)
    return [doc["_id"] for doc in docs]


@pytest.fixture
def logs(cluster, _template):
    """Tenant A: two jobs (one with two attempts); tenant B: one job with its own secrets."""
    slug = f"lg{uuid.uuid4().hex[:10]}"
    a, b = make_world(slug), make_world(f"{slug}-x")
    member_a, member_b = a.users[Role.MEMBER], b.users[Role.MEMBER]
    train = make_job(project=a.project, user=member_a, name="train", cluster=cluster)
    other_project = ProjectFactory(tenant=a.tenant, slug="eval")
    evaluate = make_job(project=other_project, user=member_a, name="eval", cluster=cluster)
    spy = make_job(project=b.project, user=member_b, name="spy", cluster=cluster)
    t1 = train.attempts.create(number=1, state="FAILED")
    t2 = train.attempts.create(number=2, state="RUNNING")
    e1 = evaluate.attempts.create(number=1, state="SUCCEEDED")
    s1 = spy.attempts.create(number=1, state="RUNNING")
    indices: set[str] = set()
    at = lambda minutes: T0 + timedelta(minutes=minutes)  # noqa: E731
    ids = {
        "t1_out": ship(
            indices,
            a,
            t1,
            "stdout",
            [
                {"message": "epoch 1 loss 0.9", "level": "INFO", "rank": 0, "timestamp": at(0)},
                {"message": "epoch 2 loss 0.7", "level": "INFO", "rank": 0, "timestamp": at(1)},
                {"message": "nccl timeout on ring 0", "level": "ERROR", "timestamp": at(2)},
                {"message": "saving <b>checkpoint</b>", "level": "INFO", "timestamp": at(3)},
            ],
        ),
        "t1_err": ship(
            indices,
            a,
            t1,
            "stderr",
            [
                {"message": "CUDA error: out of memory", "level": "ERROR", "timestamp": at(2)},
                {"message": "Traceback follows", "level": "CRITICAL", "timestamp": at(2)},
            ],
        ),
        "t2_out": ship(
            indices,
            a,
            t2,
            "stdout",
            [
                {"message": f"step {i} gpu ok", "node": "n2", "rank": 1, "timestamp": at(10 + i)}
                for i in range(7)
            ],
        ),
        "e1_out": ship(
            indices,
            a,
            e1,
            "stdout",
            [
                {"message": "eval accuracy 0.91", "level": "WARNING", "timestamp": at(20)},
                {"message": "nccl timeout again", "level": "ERROR", "timestamp": at(21)},
            ],
        ),
        "s1_out": ship(
            indices,
            b,
            s1,
            "stdout",
            [{"message": f"globexsecret nccl timeout gpu {i}", "level": "ERROR"} for i in range(5)],
        ),
    }
    data = {
        "a": a,
        "b": b,
        "train": train,
        "evaluate": evaluate,
        "spy": spy,
        "t1": t1,
        "t2": t2,
        "e1": e1,
        "s1": s1,
        "ids": ids,
        "a_ids": {i for key, group in ids.items() if key != "s1_out" for i in group},
        "b_ids": set(ids["s1_out"]),
    }
    yield data
    client().indices.delete(index=",".join(sorted(indices)), ignore_unavailable=True)


def get(world, url, params=None, role=Role.VIEWER, status=200) -> dict:
    response = world.client(role).get(url, params or {})
    assert response.status_code == status, response.content
    return response.json()


def ids_of(body) -> set[str]:
    return {hit["id"] for hit in body["hits"]}


def test_b_slug_shares_a_index_pattern(logs):
    """The premise of the widening tests: A's index pattern reaches B's indices."""
    count = client().count(index=index_pattern(logs["a"].tenant.slug))["count"]
    assert count == len(logs["a_ids"]) + len(logs["b_ids"])
    assert ids_of(get(logs["b"], SEARCH, {"q": "globexsecret"})) == logs["b_ids"]


def test_full_text_hit_with_highlight(logs):
    body = get(logs["a"], SEARCH, {"q": "nccl timeout"})
    assert body["total"] == 2 and ids_of(body) == {
        logs["ids"]["t1_out"][2],
        logs["ids"]["e1_out"][1],
    }
    newest = body["hits"][0]
    assert newest["message"] == "nccl timeout again"
    assert newest["highlight"] == "<mark>nccl</mark> <mark>timeout</mark> again"
    assert newest["job"] == str(logs["evaluate"].id) and newest["attempt_number"] == 1
    assert newest["stream"] == "stdout" and newest["level"] == "ERROR"
    assert isinstance(body["took_ms"], int) and body["next"] is None
    assert "histogram" not in body

    escaped = get(logs["a"], SEARCH, {"q": "checkpoint"})["hits"][0]
    assert escaped["message"] == "saving <b>checkpoint</b>"
    assert escaped["highlight"] == "saving &lt;b&gt;<mark>checkpoint</mark>&lt;&#x2F;b&gt;"

    everything = get(logs["a"], SEARCH)
    assert everything["total"] == len(logs["a_ids"])
    assert all(hit["highlight"] is None for hit in everything["hits"])


def test_each_filter(logs):
    a, ids = logs["a"], logs["ids"]

    def search(**params):
        return ids_of(get(a, SEARCH, {"size": 100, **params}))

    assert search(project=str(a.project.id)) == {*ids["t1_out"], *ids["t1_err"], *ids["t2_out"]}
    assert search(job=str(logs["evaluate"].id)) == set(ids["e1_out"])
    assert search(attempt=str(logs["t2"].id)) == set(ids["t2_out"])
    assert search(attempt=str(logs["t1"].id), stream="stderr") == set(ids["t1_err"])
    assert search(level="ERROR") == {ids["t1_out"][2], ids["t1_err"][0], ids["e1_out"][1]}
    assert search(level="error,critical") == {
        ids["t1_out"][2],
        *ids["t1_err"],
        ids["e1_out"][1],
    }
    assert search(node="n2") == set(ids["t2_out"])
    assert search(rank=0) == set(ids["t1_out"][:2])
    assert search(rank=1, q="step 3") == {ids["t2_out"][3]}
    since, until = T0 + timedelta(minutes=11), T0 + timedelta(minutes=13)
    assert search(since=since.isoformat(), until=until.isoformat()) == set(ids["t2_out"][1:4])
    assert search(since=(T0 + timedelta(minutes=20)).isoformat()) == set(ids["e1_out"])
    assert search(until=(T0 + timedelta(minutes=1)).isoformat()) == set(ids["t1_out"][:2])
    # a search form's empty fields are no filter at all
    assert search(q="", project="", job="", stream="", level="", node="") == logs["a_ids"]


def test_pages_are_disjoint_and_cover_every_hit(logs):
    a = logs["a"]
    seen, pages, after = [], 0, None
    while True:
        params = {"size": 4, **({"after": after} if after else {})}
        body = get(a, SEARCH, params)
        assert body["total"] == len(logs["a_ids"])
        seen += body["hits"]
        pages += 1
        after = body["next"]
        if after is None:
            break
    ids = [hit["id"] for hit in seen]
    assert len(ids) == len(set(ids)) and set(ids) == logs["a_ids"]
    assert pages == -(-len(logs["a_ids"]) // 4)
    keys = [(hit["timestamp"], hit["offset"]) for hit in seen]
    assert keys == sorted(keys, reverse=True)
    # lines with the same timestamp (t1's stdout and stderr at minute 2) are all there
    assert {logs["ids"]["t1_out"][2], *logs["ids"]["t1_err"]} <= set(ids)


def test_histogram_counts_sum_to_total(logs):
    a = logs["a"]
    fixed = get(a, SEARCH, {"histogram": "1", "interval": "1m"})
    assert fixed["interval"] == "1m"
    assert sum(b["count"] for b in fixed["histogram"]) == fixed["total"] == len(logs["a_ids"])
    assert len(fixed["histogram"]) == 22  # minute 0 to minute 21, empty minutes included
    assert fixed["histogram"][0]["time"].startswith("2025-03-01T23:58:00")

    auto = get(a, SEARCH, {"histogram": "true", "q": "nccl"})
    assert sum(b["count"] for b in auto["histogram"]) == auto["total"] == 2

    bounded = get(
        a,
        SEARCH,
        {
            "histogram": "1",
            "since": T0.isoformat(),
            "until": (T0 + timedelta(hours=1)).isoformat(),
        },
    )
    assert bounded["interval"] == "1m" and len(bounded["histogram"]) == 61
    assert sum(b["count"] for b in bounded["histogram"]) == bounded["total"]

    nothing = get(a, SEARCH, {"histogram": "1", "q": "nosuchwordanywhere"})
    assert nothing["histogram"] == [] and nothing["total"] == 0

    too_many = a.client(Role.VIEWER).get(
        SEARCH,
        {"interval": "1ms", "since": T0.isoformat(), "until": (T0 + timedelta(days=1)).isoformat()},
    )
    assert too_many.status_code == 400 and "interval" in too_many.json()["error"]["fields"]


def test_context_returns_neighbours_in_order(logs):
    a, ids = logs["a"], logs["ids"]["t2_out"]
    body = get(a, CONTEXT, {"id": ids[3], "before": 2, "after": 10})
    assert body["hit"]["id"] == ids[3]
    assert [line["id"] for line in body["before"]] == ids[1:3]
    assert [line["id"] for line in body["after"]] == ids[4:]
    first = get(a, CONTEXT, {"id": ids[0]})
    assert first["before"] == [] and [line["id"] for line in first["after"]] == ids[1:]
    # stdout and stderr of one attempt are separate streams
    err = get(a, CONTEXT, {"id": logs["ids"]["t1_err"][1]})
    assert [line["id"] for line in err["before"]] == logs["ids"]["t1_err"][:1]
    assert err["after"] == []


@pytest.mark.parametrize(
    "query",
    [
        "tenant:other OR *",
        "* OR tenant:{b_tenant}",
        "*",
        '" OR 1=1',
        '" OR 1=1 --',
        "job:{b_job}",
        "globexsecret",
        "globexsecret | *",
        "tenant:{b_tenant} | nccl",
        "(nccl) | (_id:* tenant:*)",
        "{b_tenant}",
    ],
)
def test_query_text_never_widens_the_tenant(logs, query):
    text = query.format(b_tenant=logs["b"].tenant.id, b_job=logs["spy"].id)
    body = get(logs["a"], SEARCH, {"q": text, "size": 500, "histogram": "1"})
    assert not ids_of(body) & logs["b_ids"]
    assert ids_of(body) <= logs["a_ids"]
    assert body["total"] <= len(logs["a_ids"])
    assert sum(b["count"] for b in body["histogram"]) == body["total"]


def test_other_tenant_objects_are_400s(logs):
    a, b = logs["a"], logs["b"]
    for name, value in [
        ("project", b.project.id),
        ("job", logs["spy"].id),
        ("attempt", logs["s1"].id),
        ("project", uuid.uuid4()),
    ]:
        body = get(a, SEARCH, {name: str(value)}, status=400)
        assert body["error"]["fields"] == {name: ["Not found."]}


def test_crafted_after_tokens_stay_in_the_tenant(logs):
    a, b = logs["a"], logs["b"]
    # A real token from B's own search, replayed by A, and one crafted at B's newest line.
    b_page = get(b, SEARCH, {"size": 1})
    b_first = b_page["hits"][0]
    crafted = encode_cursor(
        [
            int(datetime.fromisoformat(b_first["timestamp"]).timestamp() * 1000) + 1,
            b_first["offset"],
            b_first["attempt"],
            b_first["stream"],
        ]
    )
    far_future = encode_cursor([2**61, 2**61, "z", "z"])
    for token in (b_page["next"], crafted, far_future):
        body = get(a, SEARCH, {"after": token, "size": 500})
        assert ids_of(body) <= logs["a_ids"] and not ids_of(body) & logs["b_ids"]
    assert ids_of(get(a, SEARCH, {"after": far_future, "size": 500})) == logs["a_ids"]
    for bad in ("not-base64!", base64.urlsafe_b64encode(b'{"tenant": "x"}').decode(), "W10"):
        body = get(a, SEARCH, {"after": bad}, status=400)
        assert "after" in body["error"]["fields"]
    injected = base64.urlsafe_b64encode(json.dumps([1, 2, {"match_all": {}}, "x"]).encode())
    assert "after" in get(a, SEARCH, {"after": injected.decode()}, status=400)["error"]["fields"]


def test_context_of_another_tenants_line_is_404(logs):
    a, b = logs["a"], logs["b"]
    b_line = logs["ids"]["s1_out"][2]
    body = get(a, CONTEXT, {"id": b_line}, status=404)
    assert body["error"]["code"] == "not_found"
    assert get(b, CONTEXT, {"id": b_line})["hit"]["id"] == b_line
    # A's own attempt with B's offsets, and an unknown line: 404 too
    missing = f"{logs['t2'].id}:stderr:0"
    assert get(a, CONTEXT, {"id": missing}, status=404)["error"]["code"] == "not_found"
    assert "id" in get(a, CONTEXT, {"id": "nope"}, status=400)["error"]["fields"]


def test_token_of_one_tenant_sees_only_that_tenant(logs, cluster):
    """A user in both tenants: a session sees both; a token for A sees only A."""
    from tests.factories import MembershipFactory

    a, b = logs["a"], logs["b"]
    user = a.users[Role.VIEWER]
    MembershipFactory(tenant=b.tenant, user=user, role=Role.VIEWER)
    both = APIClient()
    both.force_login(user)
    body = both.get(SEARCH, {"q": "nccl", "size": 100}).json()
    assert ids_of(body) == {logs["ids"]["t1_out"][2], logs["ids"]["e1_out"][1], *logs["b_ids"]}
    only_a = ids_of(get(a, SEARCH, {"q": "nccl", "size": 100}))
    assert only_a == {logs["ids"]["t1_out"][2], logs["ids"]["e1_out"][1]}


def test_anonymous_is_401(logs):
    anonymous = APIClient()
    for url, params in ((SEARCH, {"q": "nccl"}), (CONTEXT, {"id": logs["ids"]["s1_out"][0]})):
        response = anonymous.get(url, params)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "not_authenticated"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday-ish"}, "since"),
        ({"until": "2025-13-45"}, "until"),
        ({"since": "2025-03-02T00:00:00Z", "until": "2025-03-01T00:00:00Z"}, "until"),
        ({"size": 501}, "size"),
        ({"size": 0}, "size"),
        ({"stream": "stdin"}, "stream"),
        ({"level": "LOUD"}, "level"),
        ({"level": "ERROR,LOUD"}, "level"),
        ({"rank": -1}, "rank"),
        ({"interval": "1 minute"}, "interval"),
        ({"project": "not-a-uuid"}, "project"),
    ],
)
def test_bad_parameters_are_400_by_field(logs, params, field):
    body = get(logs["a"], SEARCH, params, status=400)
    assert body["error"]["code"] == "invalid" and field in body["error"]["fields"]


def test_context_parameters_are_validated(logs):
    a = logs["a"]
    assert "id" in get(a, CONTEXT, {}, status=400)["error"]["fields"]
    line = logs["ids"]["t2_out"][0]
    assert "before" in get(a, CONTEXT, {"id": line, "before": 201}, status=400)["error"]["fields"]


def test_elasticsearch_unreachable_is_503(logs):
    a = logs["a"]
    with override_settings(TORUS_ELASTICSEARCH_URL="http://127.0.0.1:9"):
        for url, params in (
            (SEARCH, {"q": "nccl"}),
            (CONTEXT, {"id": logs["ids"]["t2_out"][0]}),
        ):
            body = get(a, url, params, status=503)
            assert body["error"]["code"] == "unavailable" and body["error"]["fields"] == {}
            assert "unavailable" in body["error"]["message"]


@pytest.mark.django_db
def test_histogram_of_a_tenant_without_logs_is_empty():
    """A tenant whose jobs never wrote a line has no index yet: an empty answer, not a 500."""
    world = make_world(f"nolog{uuid.uuid4().hex[:8]}")
    for params in ({"histogram": "1"}, {"histogram": "1", "since": T0.isoformat()}):
        body = get(world, SEARCH, params)
        assert body["total"] == 0 and body["hits"] == [] and body["histogram"] == []


def test_a_search_by_token_costs_no_sql_beyond_the_objects_it_names(logs):
    """Query-count baselines: the token (with its tenant's slug, the index pattern) comes
    from the process's token cache; only a named project, job or attempt is read (visible
    to the caller, and its tenant)."""
    a = logs["a"]
    client = a.client(Role.VIEWER)
    assert client.get(SEARCH, {"q": "nccl"}).status_code == 200  # the token, read once
    for params, statements in (
        ({"q": "nccl"}, 0),
        ({"q": "nccl", "histogram": "1"}, 0),
        ({"level": "ERROR", "size": 2}, 0),
        ({"q": "nccl", "project": str(a.project.id)}, 1),
        ({"job": str(logs["train"].id)}, 1),
        ({"attempt": str(logs["t1"].id), "stream": "stderr"}, 1),
    ):
        with CaptureQueriesContext(connection) as captured:
            response = client.get(SEARCH, params)
        assert response.status_code == 200, response.content
        assert len(captured) == statements, [q["sql"] for q in captured.captured_queries]
    assert ids_of(get(a, SEARCH, {"q": "nccl"})) == {
        logs["ids"]["t1_out"][2],
        logs["ids"]["e1_out"][1],
    }
