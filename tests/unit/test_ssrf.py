"""The SSRF address classifier (core/notify/ssrf.py): a table of addresses and their kinds."""

from __future__ import annotations

import socket
from ipaddress import IPv4Address, ip_address

import pytest

from agentcron.core.notify.ssrf import (
    MAX_ADDRESSES,
    PrivateDestination,
    classify,
    is_localhost_name,
    literal_host_kind,
    parse_ip_literal,
    resolve,
    vet,
)
from tests.network import resolving

# (address, kind or None for public)
ADDRESSES = [
    # public
    ("8.8.8.8", None),
    ("93.184.216.34", None),
    ("1.1.1.1", None),
    ("2606:4700:4700::1111", None),
    ("2a00:1450:4001:80b::200e", None),
    ("::ffff:8.8.8.8", None),  # IPv4-mapped public: reaches 8.8.8.8
    ("64:ff9b::808:808", None),  # NAT64 of a public address: must keep working
    ("2002:808:808::1", None),  # 6to4 of a public address
    # unspecified
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    # loopback
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    # cloud metadata (named apart from their ranges)
    ("169.254.169.254", "cloud metadata"),
    ("169.254.170.2", "cloud metadata"),
    ("100.100.100.200", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    # link-local
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    # multicast
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    # private
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("fd12:3456:789a::1", "private"),
    ("fc00::1", "private"),
    # shared address space (RFC 6598)
    ("100.64.0.1", "shared (carrier-grade NAT)"),
    ("100.127.255.254", "shared (carrier-grade NAT)"),
    # deprecated site-local and local-use NAT64
    ("fec0::1", "site-local"),
    ("64:ff9b:1::a00:1", "site-local"),
    # reserved
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("::7f00:1", "reserved"),  # IPv4-compatible (deprecated)
    ("5f00::1", "reserved"),
    # special-purpose, not globally routable
    ("0.1.2.3", "special-purpose"),
    ("192.0.0.8", "special-purpose"),
    ("192.0.2.10", "special-purpose"),
    ("198.18.0.1", "special-purpose"),
    ("203.0.113.7", "special-purpose"),
    ("2001:db8::1", "special-purpose"),
    ("3fff::1", "special-purpose"),
    # IPv6 forms that carry an IPv4 address are judged by that address
    ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
    ("::ffff:169.254.169.254", "cloud metadata (IPv4-mapped)"),
    ("::ffff:10.1.2.3", "private (IPv4-mapped)"),
    ("::ffff:0.0.0.0", "unspecified (IPv4-mapped)"),
    ("64:ff9b::7f00:1", "loopback (NAT64)"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata (NAT64)"),
    ("2002:7f00:1::", "loopback (6to4)"),
    ("2002:c0a8:101::1", "private (6to4)"),
    ("2002:a9fe:a9fe::", "cloud metadata (6to4)"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo tunnel"),
]


@pytest.mark.parametrize(("address", "kind"), ADDRESSES, ids=[a for a, _ in ADDRESSES])
def test_classify(address: str, kind: str | None) -> None:
    assert classify(ip_address(address)) == kind


LOCALHOST_NAMES = [
    ("localhost", True),
    ("LOCALHOST", True),
    ("localhost.", True),
    ("api.localhost", True),
    ("a.b.LocalHost.", True),
    ("localhost.example.org", False),
    ("mylocalhost", False),
    ("example.org", False),
]


@pytest.mark.parametrize(("host", "expected"), LOCALHOST_NAMES)
def test_localhost_names(host: str, expected: bool) -> None:
    assert is_localhost_name(host) is expected


LITERALS = [
    ("127.0.0.1", IPv4Address("127.0.0.1")),
    ("::1", ip_address("::1")),
    # legacy IPv4 spellings that the C resolver accepts as addresses
    ("127.1", IPv4Address("127.0.0.1")),
    ("2130706433", IPv4Address("127.0.0.1")),
    ("0x7f000001", IPv4Address("127.0.0.1")),
    ("0x7f.0.0.1", IPv4Address("127.0.0.1")),
    ("0177.0.0.1", IPv4Address("127.0.0.1")),
    ("10.1", IPv4Address("10.0.0.1")),
    # names
    ("example.org", None),
    ("0x", None),
    ("1.2.3.4.5", None),
    ("127..1", None),
    ("cafe", None),
    ("", None),
]


@pytest.mark.parametrize(("host", "expected"), LITERALS)
def test_parse_ip_literal(host: str, expected: object) -> None:
    assert parse_ip_literal(host) == expected


# A literal is judged by the ADDRESSES table and a name by LOCALHOST_NAMES: one of each way.
@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("hooks.localhost", "localhost"),
        ("2130706433", "loopback"),
        ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
        ("8.8.8.8", None),
        ("example.org", None),  # names are judged when resolved, at delivery
    ],
)
def test_literal_host_kind(host: str, kind: str | None) -> None:
    assert literal_host_kind(host) == kind


async def test_resolve_gives_distinct_addresses_of_a_literal() -> None:
    assert await resolve("127.0.0.1", 80) == [IPv4Address("127.0.0.1")]


async def test_resolve_localhost_gives_loopback_addresses_only() -> None:
    addresses = await resolve("localhost", 443)
    assert addresses and len(addresses) == len(set(addresses))
    assert all(classify(a) == "loopback" for a in addresses)


async def test_resolve_of_an_unknown_name_raises_oserror() -> None:
    with pytest.raises(socket.gaierror):
        await resolve("no-such-host.invalid", 80)  # RFC 6761: .invalid never resolves


async def test_vet_refuses_a_name_when_any_of_its_addresses_is_not_public() -> None:
    # The public record comes first: the name's owner orders them, so every one counts.
    mixed = resolving("93.184.216.34", "10.0.0.5")
    with pytest.raises(PrivateDestination, match=r"^db\.example\.test resolves to a private"):
        await vet("db.example.test", 5432, allow_private=False, resolver=mixed)
    with pytest.raises(PrivateDestination, match=r"^10\.0\.0\.5 is a private address$"):
        await vet("10.0.0.5", 5432, allow_private=False)


async def test_vet_refuses_a_localhost_name_whatever_it_resolves_to() -> None:
    public = resolving("93.184.216.34")
    with pytest.raises(PrivateDestination, match="resolves to a loopback address"):
        await vet("mail.localhost", 25, allow_private=False, resolver=public)


async def test_vet_gives_the_addresses_to_connect_to_in_the_resolvers_order() -> None:
    many = [f"93.184.216.{n}" for n in range(10)]
    addresses = await vet("example.test", 443, allow_private=False, resolver=resolving(*many))
    assert [str(a) for a in addresses] == many[:MAX_ADDRESSES]
    # With private destinations allowed, nothing is judged but the answer is still the one
    # the connection must use.
    private = await vet("db.example.test", 5432, allow_private=True, resolver=resolving("10.0.0.5"))
    assert private == [ip_address("10.0.0.5")]
