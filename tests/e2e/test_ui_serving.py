"""Django serves the built UI: index.html at / and at client routes (never cached), hashed
assets compressed and cached for good, and never in the way of /api, /admin or the probes."""

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_index_at_root_and_client_routes(built_ui):
    client = Client()
    for path in ("/", "/jobs", "/jobs/4b7f0000-0000-0000-0000-000000000000", "/admin-console"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response["Cache-Control"] == "no-cache"
        assert b'<div id="root">' in response.content
        assert b"/static/ui/assets/" in response.content
    assert client.post("/jobs").status_code == 405  # the fallback answers reads only


def test_api_admin_and_probes_are_not_shadowed(built_ui):
    client = Client()
    missing = client.get("/api/v1/no-such-thing")
    assert missing.status_code == 404
    assert missing["Content-Type"].startswith("application/json")
    assert client.get("/healthz").status_code == 200
    assert client.get("/admin/login/").status_code == 200
    assert b'<div id="root">' not in client.get("/admin/login/").content
    assert client.get("/static/ui/no-such.js").status_code == 404


def test_hashed_assets_compressed_and_immutable(built_ui):
    client = Client()
    html = client.get("/").content.decode()
    script = re.search(r'src="(/static/ui/assets/index-[\w-]+\.js)"', html).group(1)
    response = client.get(script, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "immutable" in response["Cache-Control"]
    assert "max-age=315360000" in response["Cache-Control"]
