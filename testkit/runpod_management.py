"""A stand-in of RunPod's management API (REST v2) and of one endpoint's queue API, on 127.0.0.1, for ``popcon runpod``.

Management routes, as RunPod documents them (docs.runpod.io/api-reference-v2; the schema of their bodies is
``runpod_v2_schema.json`` beside this file, copied from RunPod's published OpenAPI with its source and date):
  ``GET|POST /v2/templates``, ``PATCH /v2/templates/{id}``, ``GET|POST /v2/serverless``, ``PATCH /v2/serverless/{id}``
      Bearer auth (else 401); wrapped lists (``{"templates": [...]}``, ``{"endpoints": [...]}``); 201 on create; a
      body the published schema refuses gets 422 with the validator's messages, as RFC 9457 problems.
      An endpoint's ``gpu`` is updated field by field; ``pools`` without ``excludedTypes`` clears the exclusions, an
      exclusion outside the pools is a 400, a non-empty ``allowedCudaVersions`` beside ``minCudaVersion`` a 400.
  ``GET /v2/catalog/gpus?include=AVAILABILITY&product=SERVERLESS&minCudaVersion=13.0``
      :data:`GPU_CATALOGUE` (or the test's own), each type's ``cudaVersions`` narrowed to the floor; ``product``
      without ``include=AVAILABILITY`` or the reverse is a 400; :attr:`FakeRunPod.catalogue_failure` makes it answer
      a failure instead (a 429 with ``Retry-After``, a 5xx).
Queue routes (``/queue/{endpoint}/...``): ``/run``, ``/status/{id}``, ``/cancel/{id}``, ``/health``; a job runs the
real handler (:class:`MattingHandler`) on its first status request, as RunPod's local test server does.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema

from gpu_activity_worker.runpod.handler import MattingHandler

SCHEMA_FILE = Path(__file__).with_name("runpod_v2_schema.json")
BODY_SCHEMAS = {
    ("POST", "templates"): "CreateTemplateRequest",
    ("PATCH", "templates"): "UpdateTemplateRequest",
    ("POST", "serverless"): "CreateEndpointRequest",
    ("PATCH", "serverless"): "UpdateEndpointRequest",
}
"""The request body schema of each write, by method and collection."""


def _gpu(gpu_id: str, name: str, pool: str | None, memory: int, cuda: dict[str, bool]) -> dict[str, Any]:
    """One entry of ``GET /v2/catalog/gpus?include=AVAILABILITY``: a GpuType with its serverless CUDA versions."""
    free = any(cuda.values())
    return {
        "id": gpu_id,
        "name": name,
        "pool": pool,
        "manufacturer": "NVIDIA",
        "memory": memory,
        "secure": True,
        "community": True,
        "price": {"secure": 0.3, "community": 0.2, **({"serverless": 0.6} if pool else {})},
        "maxCount": {"secure": 8, "community": 4},
        "availability": "HIGH" if free else "NONE",
        "cudaVersions": [{"version": version, "available": available} for version, available in cuda.items()],
    }


GPU_CATALOGUE: list[dict[str, Any]] = [
    _gpu("NVIDIA L4", "L4", "AMPERE_24", 24, {"12.8": True, "13.0": True}),
    _gpu("NVIDIA RTX A5000", "RTX A5000", "AMPERE_24", 24, {"12.8": True, "13.0": True}),
    _gpu("NVIDIA GeForce RTX 3090", "RTX 3090", "AMPERE_24", 24, {"12.8": True}),
    _gpu("NVIDIA GeForce RTX 4090", "RTX 4090", "ADA_24", 24, {"12.8": True, "13.0": False}),
    _gpu("NVIDIA RTX A4000", "RTX A4000", "AMPERE_16", 16, {"12.4": True}),
    _gpu("NVIDIA H200", "H200", None, 141, {"13.0": True}),
]
"""RunPod's GPU types as the catalogue lists them for serverless (ids, names and pools as docs.runpod.io's GPU types
page gives them; CUDA versions and capacity made up: the 3090 offers no CUDA 13, the 4090's CUDA 13 machines are
full, the H200 is in no serverless pool)."""


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class FakeRunPod:
    """State of the stand-in: what it holds, what it was sent, and how its jobs behave."""

    handler: MattingHandler
    requests: list[Recorded] = field(default_factory=list)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=lambda: json.loads(json.dumps(GPU_CATALOGUE)))
    catalogue_failure: int | None = None
    """Answer the catalogue with this status (a problem; ``Retry-After`` on a 429) instead of the list."""
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    job_mode: str = "work"
    """work: run the handler; stuck: stay IN_QUEUE; garbage: complete with an output that fits no contract; leaky:
    fail with an error that quotes the API key."""
    echo_secret_in_errors: bool = False
    echo_key_in_refusals: bool = False
    """A 401 quotes the key it was given."""
    api_key: str = ""
    """The only key accepted."""
    base_url: str = ""

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return loaded


def schema_errors(name: str, body: Any) -> list[str]:
    """What RunPod's published schema ``name`` (e.g. ``CreateEndpointRequest``) finds wrong with ``body``, each
    with where it is (``$.gpu.pools``); empty when the body is valid."""
    validator = jsonschema.Draft202012Validator({**_schema(), "$ref": f"#/components/schemas/{name}"})
    return sorted(f"{error.json_path}: {error.message}" for error in validator.iter_errors(body))


def _problem(status: int, title: str, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
    return {"title": title, "status": status, "detail": detail, **({"errors": errors} if errors else {})}


Answer = tuple[int, Any, dict[str, str]]


def _route(fake: FakeRunPod, method: str, path: str, body: Any, auth: str | None) -> Answer:
    if auth != f"Bearer {fake.api_key}":
        quoted = f": {(auth or '').removeprefix('Bearer ')}" if fake.echo_key_in_refusals else ""
        return 401, _problem(401, "Unauthorized", f"invalid bearer token{quoted}"), {}
    url = urlsplit(path)
    parts = url.path.strip("/").split("/")
    if parts[:3] == ["v2", "catalog", "gpus"]:
        return _catalogue(fake, parse_qs(url.query))
    if parts[0] == "v2":
        status, answer = _management(fake, method, parts[1:], body)
        return status, answer, {}
    if parts[0] == "queue":
        status, answer = _queue(fake, method, parts[1:], body)
        return status, answer, {}
    return 404, _problem(404, "Not Found", path), {}


def _catalogue(fake: FakeRunPod, query: dict[str, list[str]]) -> Answer:
    if fake.catalogue_failure == 429:
        return 429, _problem(429, "Too Many Requests", "rate limit exceeded"), {"Retry-After": "2"}
    if fake.catalogue_failure is not None:
        return fake.catalogue_failure, _problem(fake.catalogue_failure, "Service Unavailable", "catalog is down"), {}
    include, product = query.get("include", [""])[0], query.get("product", [""])[0]
    if (include == "AVAILABILITY") != bool(product):
        detail = "product is required with include=AVAILABILITY, and valid only with it"
        return 400, _problem(400, "Bad Request", detail), {}
    floor = query.get("minCudaVersion", [""])[0]
    if floor and include != "AVAILABILITY":
        return 400, _problem(400, "Bad Request", "minCudaVersion is valid only with include=AVAILABILITY"), {}
    gpus = json.loads(json.dumps(fake.gpus))
    for gpu in gpus:
        if include != "AVAILABILITY":
            for key in ("availability", "dataCenters", "cudaVersions"):
                gpu.pop(key, None)
        elif floor:
            gpu["cudaVersions"] = [v for v in gpu["cudaVersions"] if _version(v["version"]) >= _version(floor)]
    return 200, {"gpus": gpus}, {}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _gpu_refusal(fake: FakeRunPod, gpu: dict[str, Any]) -> str | None:
    """What RunPod answers 400 to in an endpoint's ``gpu`` (rules the schema cannot state)."""
    if gpu.get("allowedCudaVersions") and gpu.get("minCudaVersion"):
        return "allowedCudaVersions and minCudaVersion are mutually exclusive"
    inside = {g["id"] for g in fake.gpus if g["pool"] in gpu.get("pools", [])}
    outside = [t for t in gpu.get("excludedTypes", []) if t.strip() not in inside]
    return f"excludedTypes {outside} are not GPU types of the pools" if outside else None


def _updated_gpu(current: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """PATCH semantics of ``gpu``: field by field; ``pools`` sent alone clears the exclusions."""
    updated = {**current, **change}
    if "pools" in change and "excludedTypes" not in change:
        updated["excludedTypes"] = []
    return updated


def _management(fake: FakeRunPod, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
    collection, ident = parts[0], parts[1] if len(parts) > 1 else None
    store = fake.templates if collection == "templates" else fake.endpoints
    key = "templates" if collection == "templates" else "endpoints"
    if method == "GET" and ident is None:
        return 200, {key: list(store.values())}
    errors = schema_errors(BODY_SCHEMAS[(method, collection)], body)
    if errors:
        return 422, _problem(422, "Unprocessable Entity", "validation failed", errors)
    if fake.echo_secret_in_errors:
        return 422, _problem(422, "Unprocessable Entity", f"env value {body['env']} is not allowed here")
    if method == "PATCH" and ident not in store:
        return 404, _problem(404, "Not Found", f"no {collection} {ident}")
    if collection == "serverless" and "gpu" in body:
        gpu = body["gpu"] if method == "POST" else _updated_gpu(store[str(ident)].get("gpu", {}), body["gpu"])
        refusal = _gpu_refusal(fake, gpu)
        if refusal:
            return 400, _problem(400, "Bad Request", refusal)
        body = {**body, "gpu": gpu}
    if method == "POST":
        ident = uuid.uuid4().hex[:12]
        store[ident] = {"id": ident, **body}
        status = 201
    else:
        store[str(ident)] = {**store[str(ident)], **body}
        status = 200
    if collection == "serverless":
        store[str(ident)]["requestUrls"] = {"run": f"{fake.base_url}/queue/{ident}/run"}
    return status, store[str(ident)]


def _queue(fake: FakeRunPod, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
    endpoint, operation = parts[0], parts[1]
    if endpoint not in fake.endpoints:
        return 404, {"error": "endpoint not found"}
    if operation == "health":
        return 200, {"jobs": {"inQueue": 0}, "workers": {"idle": 0, "running": 0, "throttled": 1}}
    if operation == "run":
        job_id = f"job-{uuid.uuid4().hex[:8]}"
        fake.jobs[job_id] = {"id": job_id, "status": "IN_QUEUE", "input": body["input"], "policy": body["policy"]}
        return 200, {"id": job_id, "status": "IN_QUEUE"}
    job = fake.jobs.get(parts[2])
    if job is None:
        return 404, {"error": "job not found"}
    if operation == "cancel":
        job["status"] = "CANCELLED"
    elif job["status"] == "IN_QUEUE" and fake.job_mode == "garbage":
        job.update(status="COMPLETED", output={"matte": "nope"})
    elif job["status"] == "IN_QUEUE" and fake.job_mode == "leaky":
        job.update(status="FAILED", error=f"the handler crashed with its environment: RUNPOD_API_KEY {fake.api_key}")
    elif job["status"] == "IN_QUEUE" and fake.job_mode == "work":
        output = asyncio.run(fake.handler.handle({"id": job["id"], "input": job["input"]}))
        if "error" in output:
            job.update(status="FAILED", error=output["error"])
        else:
            job.update(status="COMPLETED", output=output, delayTime=120, executionTime=45)
    return 200, {key: value for key, value in job.items() if key not in ("input", "policy")}


def _http_handler(fake: FakeRunPod) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            fake.requests.append(Recorded(self.command, self.path, body))
            status, answer, headers = _route(fake, self.command, self.path, body, self.headers.get("Authorization"))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/problem+json" if status >= 400 else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads the recorded requests instead."""

    return Handler


@contextmanager
def serving(fake: FakeRunPod) -> Iterator[FakeRunPod]:
    """``fake`` served on 127.0.0.1 (its ``base_url`` set) until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _http_handler(fake))
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
