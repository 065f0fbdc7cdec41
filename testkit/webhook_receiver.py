"""A webhook receiver on loopback, as a backend would run one: it checks every delivery's signature, accepts each
event once, and can be scripted to fail the ways a real receiver does.

:class:`WebhookReceiver` is a threading HTTP server on 127.0.0.1 (an ephemeral port, kept across :meth:`down` and
:meth:`up`), used as a context manager. Every POST is recorded (:class:`ReceivedRequest`: time, headers, body,
whether :func:`core.webhooks.verify` accepted its signature, the status answered). It answers:

1. 404 to any other path than :attr:`WebhookReceiver.url`'s;
2. while :meth:`~WebhookReceiver.refuse` holds, that status (e.g. 410 Gone);
3. the next :meth:`~WebhookReceiver.fail` answers, one per request (e.g. 503 with ``Retry-After``);
4. 401 to a signature that does not verify (wrong secret, altered body, too old), as a backend must;
5. else 200, and the event is accepted.

Each answer comes after the :meth:`~WebhookReceiver.slow` delay, if any; a delivery the client gave up on is still
processed (its status recorded, its event accepted when that status is 2xx), as a real backend would, so the retry
that follows is a duplicate: :meth:`~WebhookReceiver.events` is what a backend deduplicating on ``Idempotency-Key``
keeps, and checks that every duplicate carried the same body. :meth:`~WebhookReceiver.down` stops listening (a
delivery meets connection refused) until :meth:`~WebhookReceiver.up`.

``tls=True`` serves HTTPS with a self-signed certificate for ``localhost`` and ``127.0.0.1`` made on the spot (with
``cryptography``, which moto brings into the dev environment); :meth:`~WebhookReceiver.client_context` trusts it.
"""

from __future__ import annotations

import datetime
import json
import ssl
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from core.webhooks import DEFAULT_TOLERANCE_S, SIGNATURE_HEADER, verify

DEFAULT_PATH = "/hooks/popcon"


@dataclass(frozen=True)
class Answer:
    """A scripted answer: ``status``, an optional ``Retry-After`` value and a body (plain text)."""

    status: int
    retry_after: str | None = None
    body: str = ""


@dataclass
class ReceivedRequest:
    """One request, recorded when it arrived; ``status`` is set once answered (``None`` while a slow answer waits).

    Header names are lower-case; ``body`` is the raw bytes (what was signed).
    """

    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    signature_valid: bool
    status: int | None = None

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key")

    @property
    def accepted(self) -> bool:
        """Whether the backend took the event: a valid signature and a 2xx answer."""
        return self.signature_valid and self.status is not None and 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Script:
    refusal: Answer | None = None
    failures: deque[Answer] = field(default_factory=deque)
    delay_s: float = 0.0


class WebhookReceiver:
    """The receiver. ``url`` is the webhook URL to give a set (``http://127.0.0.1:<port>/hooks/popcon``).

    Args:
        secret: The secret deliveries must be signed with.
        tls: Serve HTTPS with a self-signed certificate (:meth:`client_context` trusts it).
        path: The path events are posted to.
        tolerance_s: How old a signature's timestamp may be (:func:`core.webhooks.verify`).
    """

    def __init__(
        self, secret: str, *, tls: bool = False, path: str = DEFAULT_PATH, tolerance_s: float = DEFAULT_TOLERANCE_S
    ) -> None:
        self.secret = secret
        self.path = path
        self.tolerance_s = tolerance_s
        self._requests: list[ReceivedRequest] = []
        self._script = _Script()
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._folder = tempfile.TemporaryDirectory(prefix="webhook-receiver-") if tls else None
        self._tls = _server_context(Path(self._folder.name)) if self._folder is not None else None

    # --- Lifetime ------------------------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.up()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.down()
        if self._folder is not None:
            self._folder.cleanup()

    @property
    def origin(self) -> str:
        """``http(s)://127.0.0.1:<port>``."""
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self._port}"

    @property
    def url(self) -> str:
        """The webhook URL."""
        return self.origin + self.path

    @property
    def ca_file(self) -> Path | None:
        """With ``tls``: the PEM certificate to trust (self-signed)."""
        return None if self._folder is None else Path(self._folder.name) / "cert.pem"

    def client_context(self) -> ssl.SSLContext:
        """An SSL context for clients that trusts this receiver's certificate (and nothing else)."""
        if self.ca_file is None:
            raise RuntimeError("this receiver serves plain HTTP (tls=False)")
        return ssl.create_default_context(cafile=str(self.ca_file))

    def down(self) -> None:
        """Stop listening: the port refuses connections until :meth:`up`. Answers already waiting still go out."""
        with self._lock:
            server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def up(self) -> None:
        """Listen (again, on the same port once it had one)."""
        with self._lock:
            if self._server is not None:
                return
            server = _Server(self, self._port, self._tls)
            self._port = server.server_address[1]
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="webhook-receiver", daemon=True
            )
            self._thread.start()

    # --- Script --------------------------------------------------------------------------------------------------

    def slow(self, seconds: float) -> None:
        """Answer every request ``seconds`` after it arrived (0: at once again)."""
        with self._lock:
            self._script.delay_s = seconds

    def fail(self, times: int, status: int = 500, retry_after: float | str | None = None, body: str = "") -> None:
        """Answer the next ``times`` requests with ``status`` (and ``Retry-After: retry_after`` when given)."""
        answer = Answer(status, None if retry_after is None else _header_value(retry_after), body or f"error {status}")
        with self._lock:
            self._script.failures.extend([answer] * times)

    def refuse(self, status: int, body: str = "") -> None:
        """Answer every request with ``status`` (e.g. 410 Gone) until :meth:`reset`."""
        with self._lock:
            self._script.refusal = Answer(status, None, body or f"refused {status}")

    def reset(self) -> None:
        """Forget the script (delay, failures, refusal); what was received stays."""
        with self._lock:
            self._script = _Script()

    # --- What was received ---------------------------------------------------------------------------------------

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def deliveries(self, event_id: str) -> int:
        """How many requests carried ``event_id`` as their ``Idempotency-Key``, whatever they were answered."""
        return sum(1 for request in self.requests if request.idempotency_key == event_id)

    def events(self) -> list[Any]:
        """The events the backend took, each once (by ``Idempotency-Key``), in the order first accepted.

        Raises:
            AssertionError: An accepted request had no ``Idempotency-Key``, or two with the same key carried
                different bodies (a retry must send the same event).
        """
        bodies: dict[str, bytes] = {}
        for request in self.requests:
            if not request.accepted:
                continue
            key = request.idempotency_key
            assert key, f"an accepted delivery carried no Idempotency-Key: {request.headers}"
            if key in bodies:
                assert bodies[key] == request.body, f"two deliveries of {key} carried different bodies"
            else:
                bodies[key] = request.body
        return [json.loads(body) for body in bodies.values()]

    def wait_answered(self, timeout_s: float = 10.0) -> None:
        """Wait until every request received so far was answered (a slow answer sent, or given up by the client).

        Raises:
            TimeoutError: Some answer still waits after ``timeout_s``.
        """
        with self._answered:
            if not self._answered.wait_for(lambda: all(r.status is not None for r in self._requests), timeout_s):
                raise TimeoutError(f"the webhook receiver still answers after {timeout_s:g}s")

    # --- Called by the handler threads ---------------------------------------------------------------------------

    def _receive(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[ReceivedRequest, Answer]:
        valid = verify(self.secret, headers.get(SIGNATURE_HEADER.lower(), ""), body, tolerance_s=self.tolerance_s)
        request = ReceivedRequest(time.time(), method, path, headers, body, valid)
        with self._lock:
            self._requests.append(request)
            script = self._script
            if path.split("?", 1)[0] != self.path:
                answer = Answer(404, None, "no such hook")
            elif script.refusal is not None:
                answer = script.refusal
            elif script.failures:
                answer = script.failures.popleft()
            elif not valid:
                answer = Answer(401, None, "invalid signature")
            else:
                answer = Answer(200, None, json.dumps({"received": request.idempotency_key}))
            delay_s = script.delay_s
        if delay_s > 0:
            time.sleep(delay_s)
        return request, answer

    def _answered_with(self, request: ReceivedRequest, status: int) -> None:
        with self._answered:
            request.status = status
            self._answered.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, receiver: WebhookReceiver, port: int, tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.receiver = receiver
        if tls is not None:
            # The handshake happens in the handler's thread, on its first read: a client that refuses the
            # certificate never holds up the accepting loop.
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: clients that give up (timeouts, refused certificates) are part of the tests."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        request, answer = self.server.receiver._receive("POST", self.path, headers, body)
        # Recorded before it is sent: the backend took its decision, whether or not the client still listens.
        self.server.receiver._answered_with(request, answer.status)
        payload = answer.body.encode()
        try:
            self.send_response(answer.status)
            if answer.retry_after is not None:
                self.send_header("Retry-After", answer.retry_after)
            self.send_header("Content-Type", "application/json" if answer.status == 200 else "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (a timeout): nothing to tell it
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


def _header_value(retry_after: float | str) -> str:
    if isinstance(retry_after, str):
        return retry_after
    return str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)


def _server_context(folder: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for localhost and 127.0.0.1, written into ``folder``."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "popcon test webhook receiver")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context
