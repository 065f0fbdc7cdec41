"""Webhooks: how an event is signed, how a backend checks it, and which destinations an event may be sent to.

Signing is Stripe's scheme (``Stripe-Signature``), under the header :data:`SIGNATURE_HEADER`::

    Popcon-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd

``t`` is the Unix time of the attempt in seconds; ``v1`` the hex HMAC-SHA256, keyed with the webhook's secret, of
``b"<t>." + body``, the exact bytes of the POST's body. A backend recomputes it (:func:`verify`), compares in constant
time and refuses a timestamp older than a few minutes, so a recorded delivery cannot be replayed later. Several ``v1``
values may be given (a secret being rotated): one matching is enough.

Destinations: an event is posted only to a host whose every address is public (:func:`check_destination`), unless the
deployment allows private ones (``POPCON_WEBHOOK_ALLOW_PRIVATE``, a closed network); otherwise a set's webhook could
make the worker post to the cloud's metadata service, a database's admin port or anything else on its own network.
The sender connects to the addresses that were checked (:attr:`Destination.addresses`), not to a second resolution
of the name, which a name with a short TTL could point elsewhere in between (DNS rebinding).

This module uses only the standard library: the client (``pip install .``) checks a set's webhook with it before the
set starts (:func:`destination_problem`), the orchestration worker before every delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from workflows.contract import url_problem

SIGNATURE_HEADER = "Popcon-Signature"
"""The request header carrying :func:`sign`'s value."""
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_S = 300.0
"""How old (or how far in the future) a signature's timestamp may be before :func:`verify` refuses it."""
ALLOW_PRIVATE_ENV = "POPCON_WEBHOOK_ALLOW_PRIVATE"
DEFAULT_PORTS = {"http": 80, "https": 443}

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): its last 32 bits are the IPv4 address actually reached."""
_NOT_RESOLVED = frozenset(
    code
    for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None), getattr(socket, "EAI_ADDRFAMILY", None))
    if code is not None
)
"""``getaddrinfo`` errors that say the name has no address (the others, e.g. ``EAI_AGAIN``, may pass)."""


# --- Signatures ----------------------------------------------------------------------------------------------------


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The :data:`SIGNATURE_HEADER` value for ``body`` sent at ``timestamp``: ``t=<timestamp>,v1=<hex digest>``.

    Stripe's scheme: the hex HMAC-SHA256 of ``b"<timestamp>." + body`` keyed with ``secret`` (UTF-8).

    Args:
        secret: The webhook's secret.
        body: The exact bytes posted.
        timestamp: Unix time in whole seconds.
    """
    return f"t={timestamp},{SIGNATURE_VERSION}={_digest(secret, body, timestamp)}"


def verify(
    secret: str, header: str, body: bytes, *, now: float | None = None, tolerance_s: float = DEFAULT_TOLERANCE_S
) -> bool:
    """Whether ``header`` (a :data:`SIGNATURE_HEADER` value) signs ``body`` with ``secret``, recently enough.

    What a backend runs on every delivery before it trusts the body. Digests are compared in constant time; a
    timestamp more than ``tolerance_s`` from ``now`` is refused (replay protection), as is a header without a
    timestamp or without a ``v1`` signature. Unknown fields (a later scheme's) are ignored.

    Args:
        secret: The webhook's secret.
        header: The header's value as received.
        body: The raw request body, before any JSON parsing.
        now: The current Unix time; ``None`` is :func:`time.time`.
        tolerance_s: The largest accepted difference between the timestamp and ``now``.
    """
    timestamp: int | None = None
    signatures: list[str] = []
    for field in header.split(","):
        name, _, value = field.strip().partition("=")
        if name == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif name == SIGNATURE_VERSION:
            signatures.append(value)
    if timestamp is None or not signatures:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = _digest(secret, body, timestamp).encode("ascii")
    # Every candidate is compared, so the time taken does not tell which one (if any) matched.
    matches = [hmac.compare_digest(expected, given.encode("utf-8", "replace")) for given in signatures]
    return any(matches)


def _digest(secret: str, body: bytes, timestamp: int) -> str:
    return hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode("ascii") + body, hashlib.sha256).hexdigest()


# --- Destinations --------------------------------------------------------------------------------------------------


class DestinationRefused(ValueError):
    """A webhook URL may not be used now; the message says why in plain words.

    Attributes:
        temporary: The name could not be resolved this time (``EAI_AGAIN``: the resolver is unreachable or slow);
            trying again later may succeed. Every other refusal holds until the URL, the DNS records or the
            deployment's settings change.
    """

    def __init__(self, message: str, *, temporary: bool = False) -> None:
        super().__init__(message)
        self.temporary = temporary


@dataclass(frozen=True)
class Destination:
    """A webhook URL that may be used, and the addresses its host resolved to when checked.

    Attributes:
        url: The URL as given.
        host: Its host name or IP literal (IPv6 without brackets).
        port: Its port, or the scheme's default.
        addresses: The host's addresses (IP literals, no IPv6 scope), in the resolver's order, without repeats:
            connect to these, not to a new resolution of ``host``.
    """

    url: str
    host: str
    port: int
    addresses: tuple[str, ...]


def check_destination(url: str, *, allow_private: bool) -> Destination:
    """Resolve ``url``'s host and check that every address it has is public. Blocking (the resolver): run it in a
    thread from async code.

    Refused when any address is unspecified, loopback, link-local, multicast, private, reserved or otherwise not
    public (e.g. carrier-grade NAT's ``100.64.0.0/10``), judging an IPv4 address embedded in an IPv6 one (IPv4-mapped
    ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) as itself, unless ``allow_private``.

    Args:
        url: The webhook URL (http or https).
        allow_private: Allow private, loopback and link-local destinations (a closed network).

    Raises:
        DestinationRefused: The URL is malformed, its host does not resolve (``temporary`` when the resolver failed
            this time) or an address it resolves to is not public.
    """
    problem = url_problem(url)
    if problem:
        raise DestinationRefused(problem)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    addresses = _resolve(host, port)
    if not allow_private:
        for address in addresses:
            kind = address_kind(ipaddress.ip_address(address))
            if kind is not None:
                raise DestinationRefused(_refusal(host, address, kind))
    return Destination(url=url, host=host, port=port, addresses=addresses)


def destination_problem(url: str, *, allow_private: bool) -> str | None:
    """Why ``url`` may not receive events now (:func:`check_destination`'s refusal), or None. Blocking."""
    try:
        check_destination(url, allow_private=allow_private)
    except DestinationRefused as refused:
        return str(refused)
    return None


def address_kind(address: IpAddress) -> str | None:
    """What makes ``address`` unfit for a webhook, in words (``"a loopback address"``), or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            kind = address_kind(embedded)
            if kind is not None or address in _NAT64:
                # NAT64 reaches the embedded address: it alone decides (the prefix itself counts as reserved).
                return None if kind is None else f"{kind} ({embedded})"
    checks = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "not a public address"),
    )
    return next((kind for matched, kind in checks if matched), None)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def _resolve(host: str, port: int) -> tuple[str, ...]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        if err.errno in _NOT_RESOLVED:
            raise DestinationRefused(f"the webhook host {host} does not resolve") from err
        raise DestinationRefused(
            f"the webhook host {host} could not be resolved now ({err.strerror or err})", temporary=True
        ) from err
    except UnicodeError as err:
        raise DestinationRefused(f"the webhook host {host} is not a valid host name") from err
    addresses = dict.fromkeys(str(info[4][0]).partition("%")[0] for info in infos)
    if not addresses:
        raise DestinationRefused(f"the webhook host {host} does not resolve")
    return tuple(addresses)


def _refusal(host: str, address: str, kind: str) -> str:
    where = (
        f"the webhook address {address} is" if _is_literal(host) else f"the webhook host {host} resolves to {address},"
    )
    return (
        f"{where} {kind}: webhooks go to public addresses only "
        f"({ALLOW_PRIVATE_ENV}=true allows others, on a closed network)"
    )


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
