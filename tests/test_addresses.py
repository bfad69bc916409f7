"""cascade.addresses: the client's address is the first hop, from the right, that is not a
trusted proxy (the rule of nginx's realip module with `real_ip_recursive on`, and of
RFC 7239's section 7.4: only the entries your own proxies wrote can be believed)."""

import pytest
from django.test import RequestFactory

from cascade.addresses import client_address, parse_networks

TRUSTED = "10.0.0.0/8, 127.0.0.1/32, ::1/128"


def address(settings, peer: str, forwarded: str | None = None, trusted: str = TRUSTED) -> str:
    settings.CASCADE_TRUSTED_PROXIES = trusted
    headers = {"REMOTE_ADDR": peer}
    if forwarded is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_address(RequestFactory().get("/", **headers))


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        # Straight to gunicorn from an untrusted peer: the header is the peer's word, ignored.
        ("203.0.113.9", "198.51.100.7", "203.0.113.9"),
        ("203.0.113.9", None, "203.0.113.9"),
        # Through one trusted proxy: the entry it appended.
        ("127.0.0.1", "198.51.100.7", "198.51.100.7"),
        # The client's own forged entries sit left of the one the proxy appended: never read.
        ("127.0.0.1", "192.0.2.1, 198.51.100.7", "198.51.100.7"),
        # Two trusted proxies (a load balancer, then nginx): the first untrusted from the right.
        ("127.0.0.1", "192.0.2.1, 198.51.100.7, 10.1.2.3", "198.51.100.7"),
        # A trusted proxy that forwarded no header: itself.
        ("127.0.0.1", None, "127.0.0.1"),
        ("127.0.0.1", "", "127.0.0.1"),
        # Garbage where an address should be: the walk stops at the last trusted hop.
        ("127.0.0.1", "192.0.2.1, not-an-address", "127.0.0.1"),
        # IPv6 peers, and IPv4 as IPv6 maps.
        ("::1", "2001:db8::5", "2001:db8::5"),
        ("::ffff:127.0.0.1", " 198.51.100.7 ", "198.51.100.7"),
    ],
)
def test_the_client_is_the_first_untrusted_hop_from_the_right(settings, peer, forwarded, expected):
    assert address(settings, peer, forwarded) == expected


def test_with_no_proxy_trusted_the_header_is_never_read(settings):
    for peer in ("127.0.0.1", "10.0.0.2", "203.0.113.9"):
        assert address(settings, peer, "198.51.100.7", trusted="") == peer


def test_networks_are_cidr_or_single_addresses():
    assert [str(n) for n in parse_networks(" 10.0.0.0/8,127.0.0.1 ,, ::1")] == [
        "10.0.0.0/8",
        "127.0.0.1/32",
        "::1/128",
    ]
    with pytest.raises(ValueError, match="'10.0.0.0/33' is not an IP address or CIDR network"):
        parse_networks("10.0.0.0/33")


def test_the_deploy_check_warns_behind_a_proxy_that_is_not_trusted(settings):
    from cascade.addresses import check_trusted_proxies

    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.CASCADE_TRUSTED_PROXIES = ""
    assert [w.id for w in check_trusted_proxies(None)] == ["cascade.W001"]
    settings.CASCADE_TRUSTED_PROXIES = "127.0.0.1/32"
    assert check_trusted_proxies(None) == []
