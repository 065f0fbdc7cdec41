"""The ``deliver_event`` activity: post one of a set's events to its webhook, signed, and say whether it was taken.

One attempt per call; the ``DeliverSetEvent`` workflow retries with back-off (``workflows.calls.DELIVER_RETRY``).
Each attempt:

1. finds the secret the webhook names in ``POPCON_WEBHOOK_SECRETS`` (missing: ``WebhookRefused``);
2. resolves the host and checks every address (:func:`core.webhooks.check_destination`; a private one without
   ``POPCON_WEBHOOK_ALLOW_PRIVATE``: ``WebhookRefused``), then connects to those addresses only (the ``Host`` header
   and TLS's server name stay the URL's), so a name re-pointed in between (DNS rebinding) reaches nothing else;
3. posts ``event.model_dump_json()``, signed (:func:`core.webhooks.sign`, header ``Popcon-Signature``), with
   ``Idempotency-Key: <event id>`` (the same on every attempt), ``Popcon-Event-Id``, ``Popcon-Event-Type`` and
   ``Popcon-Delivery-Attempt``; the whole attempt (resolving included) within ``POPCON_WEBHOOK_TIMEOUT_S``, never
   following a redirect and never through a proxy (the checked address is the one reached);
4. judges the answer: 2xx returns the status; 408, 409, 425, 429 and 5xx are ``WebhookUnavailable`` (retried, after
   ``Retry-After`` when given, at most :data:`MAX_RETRY_AFTER`); any other status (a redirect, 4xx such as 410 Gone)
   is ``WebhookRefused``, naming the status and quoting the start of the body. A refused connection, a timeout, a TLS
   failure or a broken connection is ``WebhookUnavailable``.

Messages and the log name the webhook by its origin only (a path or query may carry a token) and never carry the
secret or the signature; quoted bodies pass :func:`core.redact.redact`. Heartbeats come from the worker's
interceptor (:class:`core.heartbeats.KeepBeating`).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import ssl
import time
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from core.redact import REDACTED, redact
from core.settings import WebhookSettings
from core.webhooks import SIGNATURE_HEADER, Destination, DestinationRefused, check_destination, sign
from workflows.contract import ActivityName, DeliverEventInput, FailureType, SetEvent, Webhook

log = logging.getLogger(__name__)

USER_AGENT = "popcon-webhooks"
SECRETS_ENV = "POPCON_WEBHOOK_SECRETS"
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
"""4xx answers that mean "not now" (and every 5xx): delivered again later."""
MAX_RETRY_AFTER = timedelta(minutes=10)
"""The longest ``Retry-After`` honoured; a longer one waits this long (the retry policy's back-off goes on after)."""
MIN_RETRY_AFTER = timedelta(seconds=1)
MAX_ADDRESSES_TRIED = 4
"""Per attempt, the most of a host's addresses tried when the ones before refuse the connection."""
QUOTE_CHARS = 200
"""How much of a refusing receiver's body a message quotes."""

ClientFactory = Callable[[], httpx.AsyncClient]


def default_client() -> httpx.AsyncClient:
    """The HTTP client deliveries use: no redirects, no proxies or netrc from the environment."""
    return httpx.AsyncClient(follow_redirects=False, trust_env=False)


class EventDelivery:
    """Delivers sets' events; one instance per worker, its HTTP client shared by concurrent deliveries.

    Args:
        settings: The webhook secrets, whether private addresses are allowed, the timeout of one attempt.
        client: Makes the HTTP client (tests hand in one that trusts a test certificate); ``None`` is
            :func:`default_client`. Whatever it makes, redirects are not followed and the timeout is the settings'.
    """

    def __init__(self, settings: WebhookSettings, client: ClientFactory | None = None) -> None:
        self._settings = settings
        self._client = (client or default_client)()

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    @activity.defn(name=ActivityName.DELIVER_EVENT)
    async def deliver_event(self, request: DeliverEventInput) -> int:
        """Post the event once; the receiver's HTTP status when it took it (2xx).

        Raises:
            ApplicationError: ``WebhookUnavailable`` (retryable, with ``next_retry_delay`` from ``Retry-After``) or
                ``WebhookRefused`` (not retryable), as the module docstring lists.
        """
        event = request.event
        attempt = activity.info().attempt if activity.in_activity() else 1
        webhook = request.webhook or self._deployment_webhook()
        origin = _origin(webhook.url)
        started = time.monotonic()
        # One deadline for the whole attempt, resolving the host included.
        deadline = asyncio.get_running_loop().time() + self._settings.webhook_timeout_s
        try:
            secret = self._secret(webhook.secret)
            destination = await self._destination(webhook.url, deadline)
            status = await self._post(destination, origin, event, secret, attempt, deadline)
        except ApplicationError as failure:
            log.info(
                "event %s (%s) attempt %d to %s not delivered after %.2fs: %s: %s",
                event.id,
                event.type.value,
                attempt,
                origin,
                time.monotonic() - started,
                failure.type,
                failure.message,
            )
            raise
        log.info(
            "event %s (%s) attempt %d delivered to %s: HTTP %d in %.2fs",
            event.id,
            event.type.value,
            attempt,
            origin,
            status,
            time.monotonic() - started,
        )
        return status

    def _deployment_webhook(self) -> Webhook:
        """The deployment's webhook (``POPCON_WEBHOOK_URL``, secret ``default``), read when the event is delivered:
        its URL never enters a history."""
        if not self._settings.webhook_url:
            raise FailureType.WEBHOOK_REFUSED.error("the set names no webhook and POPCON_WEBHOOK_URL is empty")
        return Webhook(url=self._settings.webhook_url)

    def _secret(self, name: str) -> str:
        secret = self._settings.webhook_secrets.get(name)
        if secret is None:
            raise FailureType.WEBHOOK_REFUSED.error(f"the webhook secret {name!r} is not configured: set {SECRETS_ENV}")
        value = secret.get_secret_value()
        if not value:
            raise FailureType.WEBHOOK_REFUSED.error(f"the webhook secret {name!r} is empty: set it in {SECRETS_ENV}")
        return value

    async def _destination(self, url: str, deadline: float) -> Destination:
        timeout_s = self._settings.webhook_timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.to_thread(
                    check_destination, url, allow_private=self._settings.webhook_allow_private
                )
        except DestinationRefused as refused:
            failure = FailureType.WEBHOOK_UNAVAILABLE if refused.temporary else FailureType.WEBHOOK_REFUSED
            raise failure.error(str(refused)) from refused
        except TimeoutError as err:
            raise FailureType.WEBHOOK_UNAVAILABLE.error(
                f"resolving the webhook host of {_origin(url)} took more than {timeout_s:g}s"
            ) from err

    async def _post(
        self, destination: Destination, origin: str, event: SetEvent, secret: str, attempt: int, deadline: float
    ) -> int:
        body = event.model_dump_json().encode("utf-8")
        signature = sign(secret, body, int(time.time()))
        try:
            url = httpx.URL(destination.url)
        except httpx.InvalidURL as err:
            raise FailureType.WEBHOOK_REFUSED.error(f"the webhook URL of {origin} cannot be posted to: {err}") from err
        headers = {
            "Host": url.netloc.decode("ascii"),
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": event.id,
            "Popcon-Event-Id": event.id,
            "Popcon-Event-Type": event.type.value,
            "Popcon-Delivery-Attempt": str(attempt),
            SIGNATURE_HEADER: signature,
        }
        # TLS checks the certificate against the URL's host, though the connection goes to a checked address.
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        timeout_s = self._settings.webhook_timeout_s
        refused: list[str] = []
        try:
            async with asyncio.timeout_at(deadline):
                for address in destination.addresses[:MAX_ADDRESSES_TRIED]:
                    try:
                        async with self._client.stream(
                            "POST",
                            url.copy_with(host=address),
                            content=body,
                            headers=headers,
                            extensions=extensions,
                            timeout=max(deadline - asyncio.get_running_loop().time(), 0.001),
                            follow_redirects=False,
                        ) as response:
                            return await _judged(response, origin, signature)
                    except httpx.ConnectError as err:
                        refused.append(_connect_problem(err, address))
        except (TimeoutError, httpx.TimeoutException) as err:
            raise FailureType.WEBHOOK_UNAVAILABLE.error(
                f"the webhook at {origin} did not answer within {timeout_s:g}s"
            ) from err
        except httpx.HTTPError as err:
            raise FailureType.WEBHOOK_UNAVAILABLE.error(
                f"the connection to the webhook at {origin} broke before it answered: {_described(err)}"
            ) from err
        raise FailureType.WEBHOOK_UNAVAILABLE.error(
            f"could not connect to the webhook at {origin}: {'; '.join(refused)}"
        )


async def _judged(response: httpx.Response, origin: str, signature: str) -> int:
    """The status of a receiver that took the event, or the failure its answer means."""
    status = response.status_code
    if 200 <= status < 300:
        return status
    quote = await _quoted_body(response, signature)
    said = f"the webhook at {origin} answered HTTP {status}" + (f" ({quote!r})" if quote else "")
    if status in RETRYABLE_STATUSES or status >= 500:
        delay = retry_after(response.headers.get("Retry-After"))
        then = f"; next attempt in {delay.total_seconds():g}s (Retry-After)" if delay is not None else ""
        raise FailureType.WEBHOOK_UNAVAILABLE.error(f"{said}{then}", next_retry_delay=delay)
    if 300 <= status < 400:
        location = redact(response.headers.get("Location", ""))[:QUOTE_CHARS]
        raise FailureType.WEBHOOK_REFUSED.error(
            f"{said}, a redirect{f' to {location!r}' if location else ''}: webhooks are not redirected, "
            "give the URL it points to"
        )
    raise FailureType.WEBHOOK_REFUSED.error(f"{said}: it will not take the event")


def retry_after(value: str | None, *, now: float | None = None) -> timedelta | None:
    """A ``Retry-After`` header (seconds or an HTTP date) as the delay before the next attempt, between
    :data:`MIN_RETRY_AFTER` and :data:`MAX_RETRY_AFTER`; ``None`` when absent or unreadable."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return timedelta(seconds=min(max(seconds, MIN_RETRY_AFTER.total_seconds()), MAX_RETRY_AFTER.total_seconds()))


async def _quoted_body(response: httpx.Response, signature: str) -> str:
    """The start of the answer's body, on one line, without secrets (nor our own signature, should it be echoed)."""
    read = b""
    try:
        async for chunk in response.aiter_bytes():
            read += chunk
            if len(read) >= 4 * QUOTE_CHARS:
                break
    except httpx.HTTPError:
        pass  # the status alone says enough
    text = " ".join(read[: 4 * QUOTE_CHARS].decode("utf-8", "replace").split())
    return redact(text.replace(signature, REDACTED))[:QUOTE_CHARS]


def _connect_problem(err: httpx.ConnectError, address: str) -> str:
    """Why connecting to ``address`` failed, in plain words."""
    cause = _cause(err, ssl.SSLError)
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"its TLS certificate was not accepted ({cause.verify_message or cause.reason})"
    if cause is not None:
        return f"the TLS handshake failed ({getattr(cause, 'reason', None) or cause})"
    if _cause(err, ConnectionRefusedError) is not None or "refused" in str(err).lower():
        return f"{address} refused the connection"
    return f"{address}: {_described(err)}"


def _cause(err: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _described(err: BaseException) -> str:
    return redact(str(err) or type(err).__name__)[:QUOTE_CHARS]


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: how messages and the log name a webhook (a path or query may hold a
    token; the contract refuses a user or password)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
