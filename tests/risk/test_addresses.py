from __future__ import annotations

import pytest

from trustrank.risk.addresses import classify_address, client_address


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1", "local"),
        ("127.8.9.10", "local"),
        ("::1", "local"),
        ("[::1]:8080", "local"),
        ("localhost", "local"),
        ("LOCALHOST", "local"),
        ("api.localhost", "local"),
        ("10.1.2.3", "internal"),
        ("172.16.0.9", "internal"),
        ("172.31.255.255", "internal"),
        ("192.168.1.20:51234", "internal"),
        ("169.254.169.254", "internal"),
        ("100.64.3.4", "internal"),
        ("fd00::1", "internal"),
        ("fe80::1%eth0", "internal"),
        ("::ffff:10.0.0.7", "internal"),
        ("::ffff:127.0.0.1", "local"),
        ("8.8.8.8", "internet"),
        ("172.32.0.1", "internet"),
        ("2001:4860:4860::8888", "internet"),
        ("::ffff:8.8.4.4", "internet"),
        ("0.0.0.0", "internet"),
        ("", "internet"),
        (None, "internet"),
        ("shop.example.com", "internet"),
        ("not an address", "internet"),
    ],
)
def test_address_classes(address, expected):
    assert classify_address(address) == expected


def test_client_address_prefers_the_original_client_over_the_socket_peer():
    attrs = {"client.address": "203.0.113.9", "network.peer.address": "10.0.0.2"}
    assert client_address(attrs) == "203.0.113.9"
    assert client_address({"network.peer.address": "10.0.0.2"}) == "10.0.0.2"
    assert client_address({}) is None
