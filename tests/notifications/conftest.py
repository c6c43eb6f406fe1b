"""A real SMTP server process (aiosmtpd, writing what it receives into a maildir) and a real
HTTP receiver for the webhook channels; e-mail goes out through Django's SMTP backend."""

import json
import mailbox
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from scripts.devstack import free_port


@pytest.fixture
def smtp_server(tmp_path, settings):
    """aiosmtpd on a port of its own; `.messages()` reads what it received."""
    port = free_port()
    maildir = tmp_path / "maildir"
    server = subprocess.Popen(
        [sys.executable, "-m", "aiosmtpd", "-n", "-l", f"127.0.0.1:{port}",
         "-c", "aiosmtpd.handlers.Mailbox", str(maildir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (maildir / "new").exists() or not _listening(port):
        assert server.poll() is None, server.stderr.read().decode()
        assert time.monotonic() < deadline, "aiosmtpd did not start"
        time.sleep(0.1)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = False, 10

    def messages():
        return list(mailbox.Maildir(maildir, create=False))  # in no particular order

    yield SimpleNamespace(port=port, process=server, messages=messages)
    server.terminate()
    server.wait(timeout=10)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def receiver(settings):
    """An HTTP server that keeps each POST (headers and JSON body) and answers `status`."""
    settings.TORUS_WEBHOOK_ALLOW_PRIVATE = True
    got = SimpleNamespace(posts=[], status=200)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.posts.append({"headers": dict(self.headers), "raw": body, "json": json.loads(body)})
            self.send_response(got.status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    got.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield got
    server.shutdown()


from tests.jobs.conftest import control_loop, slurm_cluster  # noqa: E402, F401  (fixtures)
