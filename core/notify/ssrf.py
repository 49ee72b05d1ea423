"""The SSRF guard: which destination addresses are not public, and the judgement of a host.

A webhook URL, an ``openai`` runner's ``base_url`` and an SMTP URL kept in a stored secret are
chosen by whoever may create schedules or store secrets, and the service connects to them from
inside the deployment's network. Without a guard each is a server-side request forgery
primitive: ``http://169.254.169.254/`` reads cloud credentials, ``smtp://10.0.0.5:22`` reaches
an internal service. So, unless ``AGENTCRON_ALLOW_PRIVATE_WEBHOOKS`` is set, such a connection
goes only to addresses that are globally routable.

Two checks use this module, the same for every kind of destination:
- where a URL is saved, ``literal_host_kind`` refuses a host that is a non-public IP literal or
  a ``localhost`` name (no DNS lookup: a name may legitimately resolve differently later);
- at each attempt, ``vet`` resolves the host once, judges every address (``classify``) and
  returns the addresses the connection must go to, so that the address judged is the address
  connected to (``core.notify.outbound``): a DNS answer that changes in between is never used.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

IPAddress = IPv4Address | IPv6Address
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

ALLOW_HINT = "set AGENTCRON_ALLOW_PRIVATE_WEBHOOKS=1 to allow private destinations"
# Tried in the resolver's order after a failed connect (nothing was sent yet), so an AAAA
# record without IPv6 routing does not fail every attempt; bounded so a name with many
# records cannot stretch one attempt much beyond its connect timeout.
MAX_ADDRESSES = 4

# Named only so that the refusal says "cloud metadata"; their ranges are refused anyway.
_METADATA = frozenset(
    {
        IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        IPv4Address("169.254.170.2"),  # AWS ECS task metadata
        IPv4Address("100.100.100.200"),  # Alibaba Cloud
        IPv6Address("fd00:ec2::254"),  # AWS over IPv6
    }
)
_SHARED = IPv4Network("100.64.0.0/10")  # RFC 6598 carrier-grade NAT: internal to a provider
_PRIVATE = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
    IPv6Network("fc00::/7"),  # unique local addresses
)
# IANA special-purpose ranges that are not globally reachable and that some Python versions
# ``is_global`` still calls global; listed so the answer does not depend on the interpreter.
_SPECIAL = (
    IPv4Network("0.0.0.0/8"),  # "this network"
    IPv4Network("192.0.0.0/24"),  # IETF protocol assignments
    IPv4Network("192.0.2.0/24"),  # documentation
    IPv4Network("198.18.0.0/15"),  # benchmarking
    IPv4Network("198.51.100.0/24"),  # documentation
    IPv4Network("203.0.113.0/24"),  # documentation
    IPv6Network("100::/64"),  # discard-only
    IPv6Network("2001::/23"),  # IETF protocol assignments (its few anycast services included)
    IPv6Network("2001:db8::/32"),  # documentation
    IPv6Network("3fff::/20"),  # documentation
    IPv6Network("5f00::/16"),  # segment routing SIDs
)
_NAT64 = IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: the last 32 bits are IPv4
_NAT64_LOCAL = IPv6Network("64:ff9b:1::/48")  # RFC 8215: a site's own translator
_TEREDO = IPv6Network("2001::/32")


def classify(address: IPAddress) -> str | None:
    """The kind of non-public address ``address`` is, or ``None`` when it is public.

    Kinds: ``unspecified``, ``loopback``, ``cloud metadata``, ``link-local``, ``multicast``,
    ``shared (carrier-grade NAT)``, ``private``, ``site-local``, ``Teredo tunnel``,
    ``reserved``, ``special-purpose`` (anything else that is not globally routable, such as
    documentation or benchmarking ranges). An IPv6 address that carries an IPv4 address
    (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``) is
    judged by the IPv4 address it reaches, and the kind names the form, for example
    ``loopback (IPv4-mapped)``. Pure: no I/O.
    """
    if isinstance(address, IPv6Address):
        if address.scope_id:
            # A zone index ("fe80::1%eth0") only exists on link-scoped addresses.
            address = IPv6Address(str(address).split("%", 1)[0])
        carried = _carried_ipv4(address)
        if carried is not None:
            form, inner = carried
            kind = classify(inner)
            if kind is not None:
                return f"{kind} ({form})"
            if form != "6to4":
                # The packet goes to ``inner``, which is public; the IPv6 wrapper itself sits
                # in a reserved range that must not refuse it (NAT64 networks reach every
                # IPv4-only receiver this way).
                return None
        if address in _TEREDO:
            # The client address is obfuscated and the relay is arbitrary: never vetted.
            return "Teredo tunnel"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address in _METADATA:
        return "cloud metadata"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, IPv4Address) and address in _SHARED:
        return "shared (carrier-grade NAT)"
    if any(address in network for network in _PRIVATE):
        return "private"
    if isinstance(address, IPv6Address) and (address.is_site_local or address in _NAT64_LOCAL):
        return "site-local"
    if address.is_reserved:
        return "reserved"
    if not address.is_global or any(address in network for network in _SPECIAL):
        return "special-purpose"
    return None


def _carried_ipv4(address: IPv6Address) -> tuple[str, IPv4Address] | None:
    """The IPv4 address an IPv6 address delivers to, with the name of the form, if any."""
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if address in _NAT64:
        return "NAT64", IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    return None


def is_localhost_name(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a name under it (RFC 6761 keeps those on the
    machine itself, whatever DNS says). Case and a trailing dot do not matter."""
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def parse_ip_literal(host: str) -> IPAddress | None:
    """The IP address ``host`` spells, or ``None`` for a name.

    Besides the canonical forms this accepts the legacy IPv4 spellings that the C resolver
    also accepts (``127.1``, ``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1``), so that they
    cannot slip past the creation check as if they were names. ``host`` comes without
    brackets, as ``urllib.parse.urlsplit(...).hostname`` gives it.
    """
    try:
        return ip_address(host)
    except ValueError:
        pass
    # ``inet_aton`` is permissive (glibc ignores anything after whitespace), so only spellings
    # made of digits, dots and hex letters after "0x" are handed to it.
    if not host or not all(part and _is_number(part) for part in host.split(".")):
        return None
    try:
        return IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _is_number(part: str) -> bool:
    lowered = part.lower()
    if lowered.startswith("0x"):
        return len(lowered) > 2 and all(c in "0123456789abcdef" for c in lowered[2:])
    return part.isdigit()


def literal_host_kind(host: str) -> str | None:
    """The kind of non-public destination ``host`` names without any DNS lookup:
    ``localhost`` for a localhost name, ``classify`` of an IP literal, else ``None``."""
    if is_localhost_name(host):
        return "localhost"
    literal = parse_ip_literal(host)
    return None if literal is None else classify(literal)


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every distinct TCP address of ``host``, in the resolver's order of preference.

    Uses the event loop's ``getaddrinfo`` (the system resolver, in a thread). Raises
    ``OSError`` (``socket.gaierror``) when the name does not resolve; an empty list is never
    returned.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses: list[IPAddress] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        address = ip_address(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"no IPv4 or IPv6 address for {host}")
    return addresses


class PrivateDestination(Exception):
    """A destination that is not public. ``str()`` says which host and what kind of address:
    ``10.0.0.5 is a private address``, ``mail.example.org resolves to a loopback address``."""

    def __init__(self, host: str, kind: str, *, resolved: bool) -> None:
        self.host = host
        self.kind = kind
        super().__init__(f"{host} {'resolves to' if resolved else 'is'} a {kind} address")


async def vet(
    host: str, port: int, *, allow_private: bool, resolver: Resolver = resolve
) -> list[IPAddress]:
    """The addresses a connection to ``host``:``port`` may go to: at most ``MAX_ADDRESSES``,
    in the resolver's order of preference. The caller connects to these and never resolves
    ``host`` again.

    Unless ``allow_private``, raises ``PrivateDestination`` for a ``localhost`` name and for
    a host of which *any* address is not public (``classify``): a name whose records mix
    public and private addresses is refused, as their order is the name owner's choice.
    Raises ``OSError`` when the host does not resolve (a transient failure for every caller).
    """
    if not allow_private and is_localhost_name(host):
        # RFC 6761: whatever a resolver answers, such a name means this machine.
        raise PrivateDestination(host, "loopback", resolved=True)
    addresses = await resolver(host, port)
    if not allow_private:
        for address in addresses:
            kind = classify(address)
            if kind is not None:
                raise PrivateDestination(host, kind, resolved=str(address) != host)
    return addresses[:MAX_ADDRESSES]


__all__ = [
    "ALLOW_HINT",
    "MAX_ADDRESSES",
    "IPAddress",
    "PrivateDestination",
    "Resolver",
    "classify",
    "is_localhost_name",
    "literal_host_kind",
    "parse_ip_literal",
    "resolve",
    "vet",
]
