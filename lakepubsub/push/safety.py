"""Which push endpoints a dispatcher may call, checked on the addresses it connects to.

A push endpoint is a URL chosen by whoever may edit a subscription, fetched by
the server from inside its network: without rules it reaches the cloud
metadata service, the lake's own storage endpoint or anything else internal.
So, by default:

- only ``https://``; plain ``http://`` to loopback (local development) or to
  hosts on an explicit allow-list;
- every address the host name resolves to must be public (globally routable);
  loopback is allowed unless turned off; private, link-local, carrier-grade NAT,
  multicast, reserved and metadata addresses only inside allow-listed networks;
- no credentials in the URL, no redirects (a redirect could point anywhere).

The dispatcher connects to the address that was checked (not to a second
resolution of the name), so DNS rebinding cannot swap it in between.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from lakepubsub import errors
from lakepubsub.settings.push import PushSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Cloud metadata services (AWS, GCP and Azure share the link-local one).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
METADATA_HOSTS = frozenset({"metadata", "metadata.google.internal", "instance-data"})
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_ENDPOINT_LENGTH = 2048


class UnsafeEndpoint(errors.InvalidArgument):
    """The push endpoint is not allowed by the server's push settings."""


@dataclass(frozen=True)
class Origin:
    """Where an endpoint lives: what the connection pool and the limits are keyed by."""

    scheme: str
    host: str  # lower-case host name, or an IP literal without brackets
    port: int


@dataclass(frozen=True)
class Endpoint:
    url: str
    origin: Origin
    target: str  # path and query


def parse_endpoint(url: str) -> Endpoint:
    """Check an endpoint URL's syntax (no network access); usable when a
    subscription is created to refuse what a dispatcher would refuse anyway."""
    if len(url) > MAX_ENDPOINT_LENGTH:
        raise UnsafeEndpoint(f"pushEndpoint is longer than {MAX_ENDPOINT_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeEndpoint(f"pushEndpoint is not a valid URL: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UnsafeEndpoint("pushEndpoint must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise UnsafeEndpoint("pushEndpoint must not contain credentials")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host or any(c.isspace() for c in url):
        raise UnsafeEndpoint("pushEndpoint has no valid host")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return Endpoint(url, Origin(scheme, host, port or DEFAULT_PORTS[scheme]), target)


class Guard:
    """Applies the push settings' address rules; resolves names to checked addresses."""

    def __init__(self, settings: PushSettings) -> None:
        self._settings = settings
        self._allowed: list[IPNetwork] = [
            ipaddress.ip_network(b, strict=False) for b in settings.allow_networks
        ]
        self._http_hosts: set[str] = set()
        self._http_networks: list[IPNetwork] = []
        for item in settings.allow_http_hosts:
            try:
                self._http_networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                self._http_hosts.add(item.lower())

    async def resolve(self, origin: Origin) -> list[IPAddress]:
        """The addresses ``origin`` may be reached at, all checked; ``UnsafeEndpoint`` if not."""
        if origin.host in METADATA_HOSTS:
            raise UnsafeEndpoint(f"push endpoint host {origin.host!r} is a metadata service")
        try:
            literal: IPAddress | None = ipaddress.ip_address(origin.host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [literal]
        else:
            loop = asyncio.get_running_loop()
            try:
                infos = await loop.getaddrinfo(
                    origin.host, origin.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
            except OSError as exc:
                raise errors.Unavailable(f"cannot resolve {origin.host!r}: {exc}") from exc
            addresses = []
            for info in infos:
                address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
                if address not in addresses:
                    addresses.append(address)
            if not addresses:
                raise errors.Unavailable(f"{origin.host!r} has no addresses")
        self.check(origin, addresses)
        return addresses

    def check(self, origin: Origin, addresses: list[IPAddress]) -> None:
        for address in addresses:
            self._check_address(origin, address)
        if origin.scheme == "http" and not self._http_allowed(origin, addresses):
            raise UnsafeEndpoint(
                f"plain http:// push to {origin.host!r} is not allowed "
                "(https only, except loopback and LAKEPUBSUB_PUSH_ALLOW_HTTP)"
            )

    def _http_allowed(self, origin: Origin, addresses: list[IPAddress]) -> bool:
        if origin.host in self._http_hosts:
            return True
        if all(any(_unmapped(a) in n for n in self._http_networks) for a in addresses):
            return True
        return self._settings.allow_loopback and all(_unmapped(a).is_loopback for a in addresses)

    def _check_address(self, origin: Origin, address: IPAddress) -> None:
        plain = _unmapped(address)
        if any(plain in network for network in self._allowed):
            return
        if plain in METADATA_ADDRESSES:
            raise UnsafeEndpoint(f"push endpoint {origin.host!r} is a metadata service address")
        if plain.is_loopback:
            if self._settings.allow_loopback:
                return
            raise UnsafeEndpoint(f"push endpoint {origin.host!r} is a loopback address")
        if not plain.is_global or plain.is_multicast:
            raise UnsafeEndpoint(
                f"push endpoint {origin.host!r} resolves to a non-public address ({plain}); "
                "allow it with LAKEPUBSUB_PUSH_ALLOW_NETWORKS"
            )


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _unmapped(address: IPAddress) -> IPAddress:
    """IPv4-mapped, 6to4 and NAT64 addresses are judged by the IPv4 address inside."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address
