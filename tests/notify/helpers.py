"""A local webhook receiver for the tests: a threaded HTTP server that records every request
and answers with the status codes it is given (then 200), verifying signatures as a real
receiver would."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)

    def signed_by(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("X-TrustRank-Signature", ""))


class Receiver:
    """`Receiver(answers=[500])`: the first request gets 500, every later one 200."""

    def __init__(self, *, answers: list[int] | None = None, delay: float = 0.0,
                 record: bool = True) -> None:
        self.answers = list(answers or [])
        self.delay = delay
        self.record = record
        self.requests: list[Received] = []
        self.count = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.count += 1
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    if receiver.record:
                        receiver.requests.append(Received(
                            self.path, dict(self.headers.items()), body, time.monotonic()))
                if receiver.delay:
                    time.sleep(receiver.delay)
                self.send_response(status)
                if status == 302:
                    self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self) -> list[str]:
        return [r.headers.get("X-TrustRank-Event", "") for r in self.requests]


def receiving(**kwargs: Any) -> Iterator[Receiver]:
    receiver = Receiver(**kwargs)
    try:
        yield receiver
    finally:
        receiver.stop()
