"""The browser UI (frontend/, docs/ui.md), served by Django in production.

`npm run build` writes frontend/dist/: index.html and content-hashed assets. The assets are
static files under /static/ui/ (STATICFILES_DIRS in settings; collectstatic compresses them
and WhiteNoise serves them, the hashed ones with a year-long immutable cache). index.html is
answered at / and at every client route (the SPA fallback), never for /api, /admin, /ws,
/static or the health probes, and never cached, so a new build is picked up at the next load.
The index collectstatic copied comes first: it names the assets WhiteNoise serves.
"""

from pathlib import Path

from django.conf import settings
from django.http import HttpResponse
from django.urls import re_path
from django.views.decorators.http import require_safe

NOT_BUILT = (
    "<!doctype html><title>Torus</title><p>The web UI is not built: run <code>make ui</code> "
    "(or <code>make up</code>) in a checkout; an installed server (the wheel carries no UI) "
    "serves the build that <code>TORUS_UI_DIST</code> names. "
    "The API is at <a href='/api/docs/'>/api/docs/</a>.</p>"
)


def _index_html() -> str | None:
    for candidate in (
        Path(settings.STATIC_ROOT) / "ui" / "index.html",
        settings.UI_DIST / "index.html",
    ):
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    return None


@require_safe
def index(request):
    html = _index_html()
    response = HttpResponse(html or NOT_BUILT, status=200 if html else 503)
    response["Cache-Control"] = "no-cache"
    response["X-Content-Type-Options"] = "nosniff"
    return response


# Last in config/urls.py: whatever the other routes did not take, except the server's own
# prefixes (an unknown /api/... path stays a JSON 404).
urlpatterns = [
    re_path(r"^(?!(?:api|admin|ws|static)(?:/|$)|healthz$|readyz$).*$", index, name="ui"),
]
