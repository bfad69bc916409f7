"""The client's address: what login lockouts (django-axes) and the anonymous throttle key on.

`X-Forwarded-For` is believed only as far as the proxies in CASCADE_TRUSTED_PROXIES (a list
of CIDR networks; empty, the default: nobody) wrote it. The header is read from the right: as
long as the hop that handed the request on is a trusted proxy, the entry it appended is the
address it saw, and the walk moves one entry left. The first hop that is not a trusted proxy
is the client. So a request that reaches gunicorn directly, from any address not listed, is
its REMOTE_ADDR whatever header it sends, and entries a client wrote itself (further left
than its own address) are never read: nobody can pick the address their failures count
against, or lock the real admin out by sending the admin's address.
"""

import ipaddress
from functools import lru_cache

from django.conf import settings
from django.core import checks
from django.core.signals import setting_changed
from django.dispatch import receiver

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str) -> tuple[Network, ...]:
    """`10.0.0.0/8, 127.0.0.1, ::1`: a ValueError naming the entry that is not a network."""
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or CIDR network (such as 10.0.0.0/8)") from None
    return tuple(networks)


@lru_cache(maxsize=1)
def trusted_networks() -> tuple[Network, ...]:
    return parse_networks(settings.CASCADE_TRUSTED_PROXIES)


@receiver(setting_changed)
def forget_networks(setting, **kwargs) -> None:
    if setting == "CASCADE_TRUSTED_PROXIES":
        trusted_networks.cache_clear()


def ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address, an IPv4-mapped IPv6 one as IPv4; None for anything else."""
    try:
        address = ipaddress.ip_address((text or "").strip())
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def trusted(address) -> bool:
    return address is not None and any(address in network for network in trusted_networks())


def client_address(request) -> str | None:
    """The client's address as the nearest untrusted hop (the module's docstring says why)."""
    peer = request.META.get("REMOTE_ADDR")
    current = ip(peer)
    if not trusted(current):
        return peer
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    for entry in reversed(forwarded.split(",") if forwarded else []):
        hop = ip(entry)
        if hop is None:  # not an address a proxy writes: the trusted hop is as far as we know
            break
        current = hop
        if not trusted(current):
            break
    return str(current)


@checks.register(checks.Tags.security, deploy=True)
def check_trusted_proxies(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """Behind a TLS proxy (DJANGO_HTTPS) with no proxy trusted, every client has the proxy's
    address: one attacker's wrong passwords lock everyone out of that account."""
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None) and not settings.CASCADE_TRUSTED_PROXIES:
        return [
            checks.Warning(
                "DJANGO_HTTPS is on but CASCADE_TRUSTED_PROXIES is empty: X-Forwarded-For is not believed, "
                "so every client behind your proxy shares its address for login lockouts and the "
                "anonymous throttle",
                hint="set CASCADE_TRUSTED_PROXIES to the proxy's address, such as 127.0.0.1/32",
                id="cascade.W001",
            )
        ]
    return []
