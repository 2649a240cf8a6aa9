"""A local stand-in for Jira's REST API v2: a threaded http.server that records every request
and answers as Jira does (201 with the new issue's id, key and self), or as a test tells it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeJira:
    base_url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    # (status, JSON body) answered to the next requests, in order, before the default.
    scripted: list[tuple[int, Any]] = field(default_factory=list)
    delay: float = 0.0
    _next_issue: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, method: str, path: str) -> tuple[int, Any]:
        with self._lock:
            if self.scripted:
                return self.scripted.pop(0)
            if method == "POST" and path == "/rest/api/2/issue":
                n = self._next_issue
                self._next_issue += 1
                issue_id = str(10000 + n)
                return 201, {"id": issue_id, "key": f"SEC-{n}",
                             "self": f"{self.base_url}/rest/api/2/issue/{issue_id}"}
            if method == "POST" and path.endswith("/comment"):
                return 201, {"id": "20001", "body": "…"}
            return 404, {"errorMessages": ["not found"], "errors": {}}

    def issue_creations(self) -> list[Recorded]:
        return [r for r in self.requests if r.path == "/rest/api/2/issue"]


def _handler(jira: FakeJira) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with jira._lock:
                jira.requests.append(
                    Recorded(self.command, self.path, dict(self.headers.items()), body)
                )
            if jira.delay:
                time.sleep(jira.delay)
            status, answer = jira.answer(self.command, self.path)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake_jira(settings: Any) -> Iterator[FakeJira]:
    # The fake listens on loopback, which outbound calls refuse unless allowed.
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    jira = FakeJira()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(jira))
    jira.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield jira
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
