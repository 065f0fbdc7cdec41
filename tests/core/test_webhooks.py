"""core.webhooks: Stripe-style signatures a backend can verify (and replays it refuses), and the destinations an
event may be posted to: public addresses only, unless a closed network allows private ones."""

from __future__ import annotations

import hashlib
import hmac
import socket
from typing import Any

import pytest

from core.webhooks import (
    DEFAULT_TOLERANCE_S,
    SIGNATURE_HEADER,
    DestinationRefused,
    check_destination,
    destination_problem,
    sign,
    verify,
)

SECRET = "whsec-test-0c7e1a9b5d"
BODY = b'{"id":"set-1:1","type":"set.completed"}'
NOW = 1_767_225_600


def test_the_signature_is_the_hmac_sha256_of_the_timestamp_a_dot_and_the_body() -> None:
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()

    assert SIGNATURE_HEADER == "Popcon-Signature"
    assert sign(SECRET, BODY, NOW) == f"t={NOW},v1={expected}"


def test_a_signature_verifies_with_its_secret_and_body() -> None:
    assert verify(SECRET, sign(SECRET, BODY, NOW), BODY, now=NOW + 5)


@pytest.mark.parametrize(
    ("secret", "body"),
    [(SECRET, BODY.replace(b"completed", b"cancelled")), (SECRET, BODY + b" "), ("whsec-another-secret", BODY)],
    ids=["tampered-body", "one-byte-more", "wrong-secret"],
)
def test_a_tampered_body_or_another_secret_does_not_verify(secret: str, body: bytes) -> None:
    assert not verify(secret, sign(SECRET, BODY, NOW), body, now=NOW)


@pytest.mark.parametrize("offset", [DEFAULT_TOLERANCE_S + 1, -(DEFAULT_TOLERANCE_S + 1)], ids=["too-old", "future"])
def test_a_signature_too_old_or_from_the_future_is_refused_as_a_replay(offset: float) -> None:
    header = sign(SECRET, BODY, NOW)

    assert verify(SECRET, header, BODY, now=NOW + DEFAULT_TOLERANCE_S)
    assert not verify(SECRET, header, BODY, now=NOW + offset)
    assert verify(SECRET, header, BODY, now=NOW + offset, tolerance_s=abs(offset))


@pytest.mark.parametrize(
    "header",
    ["", "garbage", f"t={NOW}", "v1=" + "0" * 64, f"t=soon,v1={'0' * 64}", f"t={NOW},v1=é", f"t={NOW},v0=abc"],
)
def test_a_malformed_header_does_not_verify(header: str) -> None:
    assert not verify(SECRET, header, BODY, now=NOW)


def test_any_of_several_v1_signatures_may_match_while_a_secret_is_rotated() -> None:
    old = sign("whsec-old-secret-1234", BODY, NOW)
    new = sign(SECRET, BODY, NOW).split(",")[1]

    assert verify(SECRET, f"{old},{new}", BODY, now=NOW)
    assert verify("whsec-old-secret-1234", f"{old},{new}", BODY, now=NOW)
    assert not verify("whsec-third-secret-1", f"{old},{new}", BODY, now=NOW)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8080/hook", "the webhook address 127.0.0.1 is a loopback address"),
        ("http://[::1]:8080/hook", "the webhook address ::1 is a loopback address"),
        ("https://10.12.0.7/hook", "the webhook address 10.12.0.7 is a private address"),
        ("http://192.168.1.20/hook", "is a private address"),
        ("http://169.254.169.254/latest/meta-data", "the webhook address 169.254.169.254 is a link-local address"),
        ("http://[fe80::1]/hook", "is a link-local address"),
        ("http://[fd00::7]/hook", "is a private address"),
        ("http://[::ffff:127.0.0.1]/hook", "::ffff:127.0.0.1 is a loopback address (127.0.0.1)"),
        ("http://[::ffff:a9fe:a9fe]/hook", "is a link-local address (169.254.169.254)"),
        ("http://[64:ff9b::a00:1]/hook", "is a private address (10.0.0.1)"),
        ("http://[2002:a00:1::]/hook", "is a private address (10.0.0.1)"),
        ("http://0.0.0.0/hook", "is an unspecified address"),
        ("http://[::]/hook", "is an unspecified address"),
        ("http://224.0.0.251/hook", "is a multicast address"),
        ("http://240.0.0.1/hook", "is a reserved address"),
        ("http://100.64.0.1/hook", "is not a public address"),
        ("http://2130706433/hook", "the webhook host 2130706433 resolves to 127.0.0.1, a loopback address"),
        ("http://localhost:9000/hook", "the webhook host localhost resolves to"),
    ],
)
def test_private_loopback_link_local_and_other_non_public_addresses_are_refused(url: str, words: str) -> None:
    problem = destination_problem(url, allow_private=False)

    assert problem is not None
    assert words in problem
    assert "POPCON_WEBHOOK_ALLOW_PRIVATE=true" in problem


@pytest.mark.parametrize(
    "url",
    ["https://8.8.8.8/hook", "https://[2606:4700:4700::1111]:8443/hook", "http://[64:ff9b::808:808]/hook"],
    ids=["ipv4", "ipv6", "nat64-of-a-public-ipv4"],
)
def test_a_public_address_may_receive_events(url: str) -> None:
    assert destination_problem(url, allow_private=False) is None


def test_private_addresses_are_allowed_on_a_closed_network() -> None:
    assert destination_problem("http://127.0.0.1:8080/hook", allow_private=True) is None
    assert destination_problem("http://[::1]/hook", allow_private=True) is None

    destination = check_destination("http://localhost:8080/hook", allow_private=True)
    assert destination.host == "localhost"
    assert destination.port == 8080
    assert "127.0.0.1" in destination.addresses or "::1" in destination.addresses


def test_the_checked_addresses_are_kept_without_repeats_and_with_the_schemes_port() -> None:
    destination = check_destination("https://[2606:4700:4700::1111]/hook", allow_private=False)

    assert destination.port == 443
    assert destination.host == "2606:4700:4700::1111"
    assert destination.addresses == ("2606:4700:4700::1111",)


def test_a_host_that_does_not_resolve_is_refused_for_good() -> None:
    with pytest.raises(DestinationRefused) as refused:
        check_destination("https://no-such-host.invalid/hook", allow_private=True)

    assert str(refused.value) == "the webhook host no-such-host.invalid does not resolve"
    assert not refused.value.temporary


def test_a_resolver_that_fails_this_time_is_a_temporary_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable_resolver(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", unreachable_resolver)
    with pytest.raises(DestinationRefused) as refused:
        check_destination("https://hooks.example.com/popcon", allow_private=False)

    assert refused.value.temporary
    assert str(refused.value) == (
        "the webhook host hooks.example.com could not be resolved now (Temporary failure in name resolution)"
    )


def test_a_host_resolving_to_one_private_address_among_public_ones_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolver(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", port)),
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fe80::1%eth0", port, 0, 2)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)

    assert destination_problem("https://hooks.example.com/popcon", allow_private=False) == (
        "the webhook host hooks.example.com resolves to fe80::1, a link-local address: webhooks go to public "
        "addresses only (POPCON_WEBHOOK_ALLOW_PRIVATE=true allows others, on a closed network)"
    )


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/hook", "must start with http:// or https://"),
        ("https://user:pw@example.com/hook", "may not carry a user or password"),
        ("https://example.com:port/hook", "is not a URL"),
    ],
)
def test_a_url_that_is_no_webhook_is_refused_before_anything_resolves(url: str, words: str) -> None:
    problem = destination_problem(url, allow_private=True)

    assert problem is not None
    assert words in problem
