"""A local stand-in for DashScope's asynchronous text-to-image API, for tests.

A real HTTP server on 127.0.0.1 (ephemeral port) that answers like the documented service:
``POST /api/v1/services/aigc/text2image/image-synthesis`` (Bearer key, ``X-DashScope-Async: enable``, JSON body
``{"model", "input": {"prompt", "negative_prompt"?}, "parameters": {"size": "W*H", "n": 1-4, "seed", ...}}``) creates
a task; ``GET /api/v1/tasks/{task_id}`` reports it PENDING, then RUNNING, then SUCCEEDED with one URL per image (or a
per-image ``{"code", "message"}``), unknown ids as UNKNOWN; the URLs serve PNGs drawn at the requested size, on the same
server and without authentication, like the service's signed storage URLs. Errors are ``{"code", "message",
"request_id"}`` with the HTTP status. Every request is recorded; failures can be scripted.
"""

from __future__ import annotations

import io
import json
import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

from PIL import Image, ImageDraw

API_PREFIX = "/api/v1"
SUBMIT_PATH = f"{API_PREFIX}/services/aigc/text2image/image-synthesis"
TASKS_PREFIX = f"{API_PREFIX}/tasks/"
IMAGES_PREFIX = "/results/"
BACKGROUND = (255, 255, 255)
SIZE_PATTERN = re.compile(r"^(\d+)\*(\d+)$")

Endpoint = Literal["submit", "task"]
Answer = tuple[int, dict[str, str], bytes]


def seed_colour(seed: int) -> tuple[int, int, int]:
    """The fill colour of the disc drawn for the image generated with ``seed`` (so tests can tell images apart)."""
    return (seed * 67 + 40) % 200, (seed * 131 + 90) % 200, (seed * 29 + 150) % 200


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received; header names are lower-case, ``body`` is the parsed JSON or ``None``."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class ScriptedError:
    """An error answer to give instead of the normal one."""

    status: int
    code: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeTask:
    """A submitted task and how often it was polled."""

    task_id: str
    prompt: str
    width: int
    height: int
    n: int
    seed: int
    polls: int = 0


class FakeDashScope:
    """The stand-in server. Use as a context manager; ``base_url`` is what the generator needs.

    Args:
        api_key: The only key accepted.
        pending_polls: Polls answered PENDING before the task runs.
        running_polls: Polls answered RUNNING before the task ends.

    Scripting (set between requests): ``task_failure`` makes tasks end FAILED with that ``(code, message)``;
    ``image_failures`` maps an image index within a task to the ``(code, message)`` given instead of its URL;
    ``never_finish`` keeps tasks RUNNING; :meth:`script_error` queues error answers; :meth:`forget_tasks` expires
    every task (they then answer UNKNOWN, as after 24 hours).
    """

    def __init__(self, *, api_key: str = "sk-fake-dashscope-key", pending_polls: int = 1, running_polls: int = 1):
        self.api_key = api_key
        self.pending_polls = pending_polls
        self.running_polls = running_polls
        self.task_failure: tuple[str, str] | None = None
        self.image_failures: dict[int, tuple[str, str]] = {}
        self.never_finish = False
        self.requests: list[RecordedRequest] = []
        self.tasks: dict[str, FakeTask] = {}
        self._errors: dict[Endpoint, deque[ScriptedError]] = {"submit": deque(), "task": deque()}
        self._lock = threading.Lock()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-dashscope", daemon=True
        )

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``, where the image URLs point."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """The API root, as ``POPCON_DASHSCOPE_BASE_URL`` would give it."""
        return self.origin + API_PREFIX

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def script_error(
        self,
        endpoint: Endpoint,
        status: int,
        code: str,
        message: str,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests to ``endpoint`` (task submit, or task poll) with this error."""
        with self._lock:
            self._errors[endpoint].extend([ScriptedError(status, code, message, headers or {})] * times)

    def forget_tasks(self) -> None:
        """Expire every task, as the service does after 24 hours."""
        with self._lock:
            self.tasks.clear()

    def submits(self) -> list[RecordedRequest]:
        """The task submissions received, in order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path == SUBMIT_PATH]

    def polls(self) -> list[RecordedRequest]:
        """The task polls received, in order."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith(TASKS_PREFIX)]

    def downloads(self) -> list[RecordedRequest]:
        """The image downloads received, in order."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith(IMAGES_PREFIX)]

    def handle(self, method: str, target: str, headers: dict[str, str], raw_body: bytes) -> Answer:
        """Answer one request (called by the HTTP handler thread)."""
        path = target.split("?", 1)[0]
        with self._lock:
            body = _parse_json(raw_body)
            self.requests.append(RecordedRequest(method, path, headers, body))
            if method == "POST" and path == SUBMIT_PATH:
                return self._submit(headers, body)
            if method == "GET" and path.startswith(TASKS_PREFIX):
                return self._poll(headers, path.removeprefix(TASKS_PREFIX))
            if method == "GET" and path.startswith(IMAGES_PREFIX):
                return self._image(path.removeprefix(IMAGES_PREFIX))
            return _error(404, "InvalidURL", "Invalid URL provided in your request.")

    def _scripted(self, endpoint: Endpoint) -> Answer | None:
        if not self._errors[endpoint]:
            return None
        scripted = self._errors[endpoint].popleft()
        return _error(scripted.status, scripted.code, scripted.message, scripted.headers)

    def _unauthorized(self, headers: dict[str, str]) -> Answer | None:
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "InvalidApiKey", "Invalid API-key provided.")
        return None

    def _submit(self, headers: dict[str, str], body: Any) -> Answer:
        refused = self._scripted("submit") or self._unauthorized(headers)
        if refused:
            return refused
        if headers.get("x-dashscope-async") != "enable":
            return _error(403, "AccessDenied", "current user api does not support synchronous calls")
        if headers.get("content-type", "").split(";")[0].strip() != "application/json" or body is None:
            return _error(400, "InvalidParameter", "the request body must be JSON (Content-Type: application/json)")
        task = _validated_task(body)
        if isinstance(task, tuple):
            return _error(400, *task)
        self.tasks[task.task_id] = task
        return _json(200, {"output": {"task_status": "PENDING", "task_id": task.task_id}, "request_id": _request_id()})

    def _poll(self, headers: dict[str, str], task_id: str) -> Answer:
        refused = self._scripted("task") or self._unauthorized(headers)
        if refused:
            return refused
        task = self.tasks.get(task_id)
        if task is None:
            return _json(200, {"request_id": _request_id(), "output": {"task_id": task_id, "task_status": "UNKNOWN"}})
        task.polls += 1
        output: dict[str, Any] = {"task_id": task_id, "submit_time": "2025-01-08 16:03:59.840"}
        if task.polls <= self.pending_polls:
            return _json(200, {"request_id": _request_id(), "output": {**output, "task_status": "PENDING"}})
        output["scheduled_time"] = "2025-01-08 16:03:59.863"
        if self.never_finish or task.polls <= self.pending_polls + self.running_polls:
            return _json(200, {"request_id": _request_id(), "output": {**output, "task_status": "RUNNING"}})
        output["end_time"] = "2025-01-08 16:04:10.660"
        if self.task_failure is not None:
            code, message = self.task_failure
            failed = {**output, "task_status": "FAILED", "code": code, "message": message}
            return _json(200, {"request_id": _request_id(), "output": failed})
        results: list[dict[str, str]] = []
        for index in range(task.n):
            if index in self.image_failures:
                code, message = self.image_failures[index]
                results.append({"code": code, "message": message})
            else:
                url = f"{self.origin}{IMAGES_PREFIX}{task_id}/{index}.png?Expires=1736337850&Signature=fake"
                results.append({"orig_prompt": task.prompt, "url": url})
        made = sum(1 for result in results if "url" in result)
        metrics = {"TOTAL": task.n, "SUCCEEDED": made, "FAILED": task.n - made}
        succeeded = {**output, "task_status": "SUCCEEDED", "results": results, "task_metrics": metrics}
        return _json(200, {"request_id": _request_id(), "output": succeeded, "usage": {"image_count": made}})

    def _image(self, name: str) -> Answer:
        task_id, _, file_name = name.partition("/")
        task = self.tasks.get(task_id)
        index = file_name.removesuffix(".png")
        if task is None or not index.isdigit() or int(index) >= task.n or int(index) in self.image_failures:
            return 404, {"Content-Type": "text/plain"}, b"NoSuchKey"
        return 200, {"Content-Type": "image/png"}, _draw(task.width, task.height, task.seed + int(index))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeDashScope) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        raw_body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        status, answer_headers, payload = self.server.fake.handle(method, self.path, headers, raw_body)
        self.send_response(status)
        for name, value in answer_headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


def _validated_task(body: Any) -> FakeTask | tuple[str, str]:
    """The task a submit body asks for, or the ``(code, message)`` saying what is wrong with it."""
    if not isinstance(body, dict) or not body.get("model"):
        return "BadRequest.EmptyModel", 'Required parameter "model" missing from request.'
    prompt_input = body.get("input")
    if not isinstance(prompt_input, dict) or not isinstance(prompt_input.get("prompt"), str):
        return "BadRequest.EmptyInput", "Required input parameter missing from request."
    if not prompt_input["prompt"].strip():
        return "InvalidParameter", "prompt must not be empty."
    if not isinstance(prompt_input.get("negative_prompt", ""), str):
        return "InvalidParameter", "negative_prompt must be a string."
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        return "InvalidParameter", "parameters must be an object."
    size = SIZE_PATTERN.match(str(parameters.get("size", "1024*1024")))
    if size is None or not all(512 <= int(edge) <= 1440 for edge in size.groups()):
        return "InvalidParameter", "size must be W*H with each side in [512, 1440]."
    n, seed = parameters.get("n", 4), parameters.get("seed", 0)
    if type(n) is not int or not 1 <= n <= 4:
        return "InvalidParameter", "n must be an integer in [1, 4]."
    if type(seed) is not int or not 0 <= seed <= 2**31 - 1:
        return "InvalidParameter", "seed must be an integer in [0, 2147483647]."
    if any(not isinstance(parameters.get(flag, False), bool) for flag in ("prompt_extend", "watermark")):
        return "InvalidParameter", "prompt_extend and watermark must be booleans."
    width, height = (int(edge) for edge in size.groups())
    return FakeTask(str(uuid.uuid4()), prompt_input["prompt"], width, height, n, seed)


def _draw(width: int, height: int, seed: int) -> bytes:
    image = Image.new("RGB", (width, height), BACKGROUND)
    ImageDraw.Draw(image).ellipse(
        (width * 0.2, height * 0.2, width * 0.8, height * 0.8), fill=seed_colour(seed), outline=(0, 0, 0), width=8
    )
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _parse_json(raw_body: bytes) -> Any:
    try:
        return json.loads(raw_body) if raw_body else None
    except ValueError:
        return None


def _request_id() -> str:
    return str(uuid.uuid4())


def _json(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(payload).encode()


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Answer:
    return _json(status, {"code": code, "message": message, "request_id": _request_id()}, headers)
