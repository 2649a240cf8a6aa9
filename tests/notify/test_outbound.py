"""lib/outbound.py: a webhook URL cannot reach the site's own network unless the operator
allows it, checked when it is configured and again after resolution when it is called."""

from __future__ import annotations

import socket

import pytest

from tests.notify.helpers import Receiver
from trustrank.lib.outbound import (
    OutboundError,
    OutboundRefused,
    outbound_request,
    outbound_url_check,
)

REFUSED = [
    "http://127.0.0.1/hook",
    "http://127.1.2.3:8080/x",
    "http://10.1.2.3/hook",
    "http://192.168.0.10/",
    "http://172.16.5.5/",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://localhost:9000/hook",
    "http://0.0.0.0/",
]


@pytest.mark.parametrize("url", REFUSED)
def test_internal_addresses_are_refused_by_default(url, settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = False
    with pytest.raises(OutboundRefused):
        outbound_url_check(url)
    with pytest.raises(OutboundRefused):
        outbound_request("POST", url, body=b"{}")


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http:///x",
                                 "https://user:pw@example.com/", "example.com/hook", ""])
def test_only_http_and_https_urls_with_a_host_are_accepted(url):
    with pytest.raises(OutboundRefused):
        outbound_url_check(url)


def test_a_public_address_passes_the_check(settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = False
    outbound_url_check("https://93.184.215.14/hook")
    outbound_url_check("http://8.8.8.8:8080/")


def test_a_name_that_resolves_to_loopback_is_refused_at_send_time(settings, monkeypatch):
    """DNS rebinding: the check runs on what the name resolves to when it is called, and the
    connection goes to that checked address."""
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = False
    real = socket.getaddrinfo

    def rebinding(host, *args, **kwargs):
        if host == "hooks.example.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(OutboundRefused, match=r"hooks\.example\.test resolves to 127\.0\.0\.1"):
        outbound_request("POST", "http://hooks.example.test/hook", body=b"{}")


def test_allowed_by_the_operator_setting_and_sent_to_the_resolved_address(settings, monkeypatch):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    receiver = Receiver()
    try:
        outbound_url_check(receiver.url)
        real = socket.getaddrinfo

        def resolve(host, *args, **kwargs):
            if host == "receiver.example.test":
                return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
            return real(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", resolve)
        url = f"http://receiver.example.test:{receiver.port}/hook?x=1"
        response = outbound_request("POST", url, body=b'{"a":1}',
                                    headers={"Content-Type": "application/json"})
        assert response.status == 200 and response.body == b"ok"
        (got,) = receiver.requests
        assert got.path == "/hook?x=1" and got.body == b'{"a":1}'
        # The Host header names the configured host, not the address connected to.
        assert got.headers["Host"] == f"receiver.example.test:{receiver.port}"
    finally:
        receiver.stop()


def test_redirects_are_not_followed(settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    receiver = Receiver(answers=[302])
    try:
        response = outbound_request("POST", receiver.url, body=b"{}")
        assert response.status == 302 and receiver.count == 1
    finally:
        receiver.stop()


def test_a_network_error_is_an_outbound_error(settings):
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OutboundError):
        outbound_request("POST", f"http://127.0.0.1:{port}/", body=b"{}", timeout=2)


def _https_server(tmp_path, leaf):
    """An https receiver with `leaf`'s certificate, recording the SNI name it is asked for."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    (tmp_path / "leaf.pem").write_bytes(leaf.pem)
    (tmp_path / "leaf.key").write_bytes(leaf.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    seen: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: seen.append(name)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(f"Host: {self.headers['Host']}")
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.mark.parametrize("cert_name", ["tls.example.test", "someone-else.example.test"])
def test_https_goes_to_the_checked_address_with_the_hosts_sni_and_certificate(
    settings, monkeypatch, tmp_path, cert_name
):
    from tests.identity.pki import issue

    root = issue("Webhook test CA", ca=True, days=30)
    leaf = issue(cert_name, issuer=root, dns=(cert_name,))
    (tmp_path / "ca.pem").write_bytes(root.pem)
    settings.TRUSTRANK_OUTBOUND_ALLOW_PRIVATE = True
    settings.TRUSTRANK_OUTBOUND_CA_BUNDLE = str(tmp_path / "ca.pem")
    server, seen = _https_server(tmp_path, leaf)
    port = server.server_address[1]
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "tls.example.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    url = f"https://tls.example.test:{port}/hook"
    try:
        if cert_name == "tls.example.test":
            assert outbound_request("POST", url, body=b"{}").status == 204
            assert seen == ["tls.example.test", f"Host: tls.example.test:{port}"]
        else:  # the certificate must name the configured host
            with pytest.raises(OutboundError):
                outbound_request("POST", url, body=b"{}")
    finally:
        server.shutdown()
