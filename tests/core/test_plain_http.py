"""The hot plain-HTTP API calls served through Django's WSGI handler inside the ASGI app
(apps/core/plain_http.py): the same answers as Django's ASGI handler gives, over real HTTP."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from apps.core import plain_http
from apps.jobs.models import Job
from apps.tenancy.models import AccessToken, Role

pytestmark = pytest.mark.django_db(transaction=True)


def scope(method="POST", path="/api/v1/jobs/", headers=()) -> dict:
    return {"type": "http", "method": method, "path": path, "headers": list(headers)}


def test_which_requests_it_takes():
    small = [(b"content-length", b"120")]
    assert plain_http.takes(scope(headers=small))
    assert plain_http.takes(scope("POST", "/api/v1/jobs/batch/", small))
    assert plain_http.takes(scope("GET", "/api/v1/logs/search/"))  # no body
    assert not plain_http.takes(scope())  # a POST of unknown length
    assert not plain_http.takes(scope(headers=[(b"transfer-encoding", b"chunked")]))
    assert not plain_http.takes(scope(headers=[(b"content-length", b"99999999")]))  # > 1 MiB
    assert not plain_http.takes(scope(headers=[(b"content-length", b"1x")]))
    assert not plain_http.takes(scope(headers=small * 2))
    assert not plain_http.takes(scope("GET", "/api/v1/jobs/"))  # not listed
    assert not plain_http.takes(scope("PUT", "/api/v1/jobs/", small))


def test_environ_is_what_asgi_request_puts_in_meta():
    environ = plain_http._environ(
        {
            **scope("GET", "/api/v1/logs/search/"),
            "query_string": "q=\u00fc".encode(),
            "client": ("10.1.2.3", 5555),
            "server": ("portal", 8443),
            "scheme": "https",
            "headers": [
                (b"accept", b"a/b"),
                (b"accept", b"c/d"),
                (b"x_forwarded_for", b"1.1.1.1"),
                (b"content-type", b"application/json"),
            ],
        },
        b"",
    )
    assert environ["HTTP_ACCEPT"] == "a/b,c/d"
    assert "HTTP_X_FORWARDED_FOR" not in environ  # '_' in a name: dropped, as Django does
    assert environ["REMOTE_ADDR"] == "10.1.2.3" and environ["SERVER_PORT"] == "8443"
    assert environ["wsgi.url_scheme"] == "https" and environ["CONTENT_TYPE"] == "application/json"
    assert environ["QUERY_STRING"].encode("latin1").decode() == "q=\u00fc"


@pytest.fixture
def http(acme, cluster, asgi_server):
    with httpx.Client(
        base_url=asgi_server.url,
        headers={"Authorization": f"Bearer {acme.tokens[Role.MEMBER]}"},
        timeout=60,
    ) as client:
        yield client


def spec(acme, name: str) -> dict:
    return {"project": str(acme.project.id), "name": name, "command": ["true"]}


def test_a_submit_over_http_is_answered_by_either_handler_alike(acme, http, monkeypatch):
    plain = http.post("/api/v1/jobs/", json=spec(acme, "plain"))  # through the WSGI handler
    bad = {**spec(acme, "bad name"), "privileged": True}
    refused = http.post("/api/v1/jobs/", json=bad)
    monkeypatch.setattr(plain_http, "THREADS", 0)  # everything to Django's ASGI handler
    asgi = http.post("/api/v1/jobs/", json=spec(acme, "asgi"))
    refused_asgi = http.post("/api/v1/jobs/", json=bad)
    assert plain.status_code == asgi.status_code == 201, plain.text
    first, second = plain.json(), asgi.json()
    assert set(first) == set(second) and first["state"] == second["state"] == "QUEUED"
    assert plain.headers["content-type"] == asgi.headers["content-type"]
    assert Job.objects.filter(name__in=["plain", "asgi"], state="QUEUED").count() == 2
    token = AccessToken.objects.get(user=acme.users[Role.MEMBER])
    assert token.last_used_ip == "127.0.0.1"  # REMOTE_ADDR came through
    assert refused.status_code == refused_asgi.status_code == 400
    assert refused.json() == refused_asgi.json()
    monkeypatch.setattr(plain_http, "THREADS", 8)
    anonymous = http.post("/api/v1/jobs/", json=spec(acme, "x"), headers={"Authorization": ""})
    assert anonymous.status_code == 401


def test_concurrent_submits_all_land(acme, http):
    def submit(i):
        return http.post("/api/v1/jobs/", json=spec(acme, f"c-{i}")).status_code

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(submit, range(24))) == [201] * 24
    assert Job.objects.filter(name__startswith="c-").count() == 24


def test_a_search_with_unicode_and_bad_parameters(acme, http):
    found = http.get("/api/v1/logs/search/", params={"q": "\u00fcber fehler"})
    assert found.status_code == 200, found.text
    assert found.json()["total"] == 0 and found.json()["hits"] == []
    bad = http.get("/api/v1/logs/search/", params={"size": 0})
    assert bad.status_code == 400 and "size" in bad.json()["error"]["fields"]
