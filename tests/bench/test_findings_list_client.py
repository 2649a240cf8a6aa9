"""The findings-list bench's HTTP client: one connection kept alive while the server keeps
it, a new one when the server closes it, a kept connection the server dropped while idle
sent again on a new one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.findings_list import PlainClient


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    close = False

    def do_GET(self) -> None:
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _base(httpd: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_kept_alive(server: ThreadingHTTPServer) -> None:
    client = PlainClient(_base(server))
    for n in range(5):
        assert client.get(f"/p{n}", {}) == (200, f"/p{n}".encode())
    assert client.connections == 1
    client.close()


def test_reopened_when_the_server_closes(server: ThreadingHTTPServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Handler, "close", True)
    client = PlainClient(_base(server))
    for n in range(4):
        assert client.get(f"/c{n}", {}) == (200, f"/c{n}".encode())
    assert client.connections == 4


def test_idle_connection_dropped_by_the_server(server: ThreadingHTTPServer) -> None:
    client = PlainClient(_base(server))
    assert client.get("/a", {})[0] == 200
    # The server lets an idle kept connection go (gunicorn's keep-alive timeout).
    assert client._conn is not None and client._conn.sock is not None
    client._conn.sock.shutdown(2)
    assert client.get("/b", {}) == (200, b"/b")
    assert client.connections == 2
