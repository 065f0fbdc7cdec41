"""``popcon runpod deploy`` and ``popcon runpod smoke`` against a stand-in of RunPod's APIs on 127.0.0.1.

The stand-in answers like the documented APIs: the REST API v2 (``/v2/templates``, ``/v2/serverless``: Bearer auth,
wrapped lists, 201 on create, RFC 9457 problems, 422 for a field the schema does not allow) and an endpoint's queue
API (``/run``, ``/status/{id}``, ``/cancel/{id}``, ``/health``), whose jobs run the real RunPod handler
(:class:`MattingHandler`, classical pipeline) on the first status request, as RunPod's local test server does. What
RunPod or the endpoint says may quote a secret: the CLI never prints one.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from core.artifacts import open_store
from core.redact import REDACTED
from core.settings import ArtifactSettings
from gpu_activity_worker.engines import builtin_steps
from gpu_activity_worker.engines.base import StepContext
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.runpod import provision
from gpu_activity_worker.runpod.handler import MattingHandler
from starter.runpod_cli import app
from testkit.s3 import s3_server

KEY = "rpa_TESTKEY0123456789"
S3_SECRET = "s3-secret-never-printed"
BUCKET = "emoji"

# Fields the v2 OpenAPI allows (unevaluatedProperties: false), and those it requires.
TEMPLATE_FIELDS = {
    "name", "image", "args", "disk", "env", "ports", "registry", "mounts", "serverless", "public", "category",
    "startSsh", "startJupyter", "allowedCudaVersions",
}  # fmt: skip
ENDPOINT_UPDATE_FIELDS = {
    "name", "templateId", "gpu", "cpu", "workers", "scaling", "timeout", "flashboot", "dataCenterIds",
    "networkVolumes", "image", "args", "disk", "env", "ports", "registry",
}  # fmt: skip
ENDPOINT_CREATE_FIELDS = ENDPOINT_UPDATE_FIELDS | {"type"}


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
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    job_mode: str = "work"
    """work: run the handler; stuck: stay IN_QUEUE; garbage: complete with an output that fits no contract; leaky:
    fail with an error that quotes the API key."""
    echo_secret_in_errors: bool = False
    echo_key_in_refusals: bool = False
    """A 401 quotes the key it was given."""
    api_key: str = KEY
    """The only key accepted."""
    base_url: str = ""

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]


def _problem(status: int, title: str, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
    return {"title": title, "status": status, "detail": detail, **({"errors": errors} if errors else {})}


def _route(fake: FakeRunPod, method: str, path: str, body: Any, auth: str | None) -> tuple[int, Any]:
    if auth != f"Bearer {fake.api_key}":
        quoted = f": {(auth or '').removeprefix('Bearer ')}" if fake.echo_key_in_refusals else ""
        return 401, _problem(401, "Unauthorized", f"invalid bearer token{quoted}")
    parts = path.strip("/").split("/")
    if parts[0] == "v2":
        return _management(fake, method, parts[1:], body)
    if parts[0] == "queue":
        return _queue(fake, method, parts[1:], body)
    return 404, _problem(404, "Not Found", path)


def _management(fake: FakeRunPod, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
    collection, ident = parts[0], parts[1] if len(parts) > 1 else None
    store = fake.templates if collection == "templates" else fake.endpoints
    key = "templates" if collection == "templates" else "endpoints"
    if method == "GET" and ident is None:
        return 200, {key: list(store.values())}
    if collection == "templates":
        allowed, required = TEMPLATE_FIELDS, ({"name", "image"} if method == "POST" else set())
    else:
        allowed = ENDPOINT_CREATE_FIELDS if method == "POST" else ENDPOINT_UPDATE_FIELDS
        required = {"name", "type", "scaling"} if method == "POST" else set()
    extra, missing = set(body) - allowed, required - set(body)
    if extra or missing:
        errors = [f"$: additional properties {sorted(extra)} not allowed"] if extra else []
        errors += [f"$: missing properties {sorted(missing)}"] if missing else []
        return 422, _problem(422, "Unprocessable Entity", "validation failed", errors)
    if fake.echo_secret_in_errors:
        return 422, _problem(422, "Unprocessable Entity", f"env value {body['env']} is not allowed here")
    if method == "POST":
        ident = uuid.uuid4().hex[:12]
        store[ident] = {"id": ident, **body}
        status = 201
    elif method == "PATCH" and ident in store:
        store[ident] = {**store[ident], **body}
        status = 200
    else:
        return 404, _problem(404, "Not Found", f"no {collection} {ident}")
    if collection == "serverless":
        store[ident]["requestUrls"] = {"run": f"{fake.base_url}/queue/{ident}/run"}
    return status, store[ident]


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
        job.update(status="FAILED", error=f"the handler crashed with its environment: RUNPOD_API_KEY {KEY}")
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
            status, answer = _route(fake, self.command, self.path, body, self.headers.get("Authorization"))
            data = json.dumps(answer).encode()
            self.send_response(status)
            content_type = "application/problem+json" if status >= 400 else "application/json"
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads the recorded requests instead."""

    return Handler


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server(BUCKET) as env:
        yield env["POPCON_S3_ENDPOINT_URL"]


@pytest.fixture
def env(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The CLI's settings (POPCON_* variables), S3-backed; tests change them before invoking the CLI."""
    monkeypatch.chdir(tmp_path)  # no stray .env file
    return {
        "POPCON_RUNPOD_API_KEY": KEY,
        "POPCON_RUNPOD_IMAGE": "docker.io/popcon/popcon-gpu:1",
        "POPCON_RUNPOD_POLL_INTERVAL_S": "0.05",
        "POPCON_ARTIFACT_ROOT": f"s3://{BUCKET}/smoke-root",
        "POPCON_S3_ENDPOINT_URL": s3_endpoint,
        "POPCON_S3_ACCESS_KEY_ID": "popcon",
        "POPCON_S3_SECRET_ACCESS_KEY": S3_SECRET,
        "POPCON_S3_REGION": "us-east-1",
    }


@pytest.fixture
def runpod(env: dict[str, str], tmp_path: Path) -> Iterator[FakeRunPod]:
    """The stand-in; its endpoint workers share the CLI's S3 bucket (another machine's view of it)."""
    worker_store = open_store(
        ArtifactSettings(
            _env_file=None,
            artifact_root=env["POPCON_ARTIFACT_ROOT"],
            s3_endpoint_url=env["POPCON_S3_ENDPOINT_URL"],
            s3_access_key_id=env["POPCON_S3_ACCESS_KEY_ID"],
            s3_secret_access_key=env["POPCON_S3_SECRET_ACCESS_KEY"],
            s3_region=env["POPCON_S3_REGION"],
        )
    )
    handler = MattingHandler(
        worker_store,
        Pipelines(builtin_steps(), StepContext(device="cpu", model_dir=tmp_path / "models")),
        concurrency=1,
        inline_max_bytes=4_000_000,
    )
    fake = FakeRunPod(handler)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _http_handler(fake))
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    env.update(POPCON_RUNPOD_REST_URL=f"{fake.base_url}/v2", POPCON_RUNPOD_BASE_URL=f"{fake.base_url}/queue")
    yield fake
    server.shutdown()
    server.server_close()
    handler.close()


def invoke(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- deploy ------------------------------------------------------------------------------------------------------


def test_dry_run_prints_the_writes_with_secrets_redacted_and_sends_none(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = invoke(env, monkeypatch, "deploy", "--dry-run")
    assert code == 0, out
    assert [(r.method, r.path) for r in runpod.requests] == [("GET", "/v2/templates"), ("GET", "/v2/serverless")]
    assert f"POST {runpod.base_url}/v2/templates" in out and f"POST {runpod.base_url}/v2/serverless" in out
    template = json.loads(out[out.index("{") : out.index(f"POST {runpod.base_url}/v2/serverless")])
    assert template["env"]["POPCON_S3_SECRET_ACCESS_KEY"] == REDACTED
    assert template["env"]["POPCON_ARTIFACT_ROOT"] == f"s3://{BUCKET}/smoke-root"
    assert (template["image"], template["args"], template["serverless"]) == (
        "docker.io/popcon/popcon-gpu:1",
        "handler",
        True,
    )
    assert '"templateId": "<id of the new template popcon-gpu>"' in out
    assert S3_SECRET not in out and KEY not in out


def test_deploy_creates_then_updates_instead_of_duplicating(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    [(template_id, template)] = runpod.templates.items()
    [(endpoint_id, endpoint)] = runpod.endpoints.items()
    assert f"template popcon-gpu created: {template_id}" in out and f"POPCON_RUNPOD_ENDPOINT_ID={endpoint_id}" in out
    assert template["env"]["POPCON_S3_SECRET_ACCESS_KEY"] == S3_SECRET, "the endpoint gets the real secret"
    assert endpoint["templateId"] == template_id
    assert endpoint["gpu"] == {
        "pools": ["AMPERE_24", "ADA_24"],
        "count": 1,
        "minCudaVersion": "13.0",
        "allowedCudaVersions": [],
    }
    assert endpoint["workers"] == {"min": 0, "max": 3, "idleTimeout": 30}
    assert (endpoint["type"], endpoint["flashboot"], endpoint["timeout"]) == ("QUEUE", "FLASHBOOT", 120_000)

    env.update(POPCON_RUNPOD_IMAGE="docker.io/popcon/popcon-gpu:2", POPCON_RUNPOD_IDLE_TIMEOUT_S="60")
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    assert (
        f"template popcon-gpu updated: {template_id}" in out
        and f"endpoint popcon-matting updated: {endpoint_id}" in out
    )
    assert list(runpod.templates) == [template_id] and list(runpod.endpoints) == [endpoint_id]
    assert runpod.templates[template_id]["image"] == "docker.io/popcon/popcon-gpu:2"
    patch = runpod.writes()[-1]
    assert (patch.method, patch.path) == ("PATCH", f"/v2/serverless/{endpoint_id}")
    assert patch.body["templateId"] == template_id and patch.body["workers"]["idleTimeout"] == 60
    assert S3_SECRET not in out and KEY not in out


def test_secrets_an_error_echoes_are_redacted(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runpod.echo_secret_in_errors = True
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 1
    assert "answered 422" in out and REDACTED in out and S3_SECRET not in out


def test_the_rest_client_redacts_its_key_and_the_secrets_it_sends(runpod: FakeRunPod) -> None:
    key, secret = f"runpod-{uuid.uuid4().hex}", f"s3-{uuid.uuid4().hex}"  # no pattern recognises them
    runpod.api_key, runpod.echo_secret_in_errors = key, True
    rest = provision.RunPodRest(f"{runpod.base_url}/v2", SecretStr(key), secrets=[secret])
    template = {"name": "popcon-gpu", "image": "popcon-gpu:1", "env": {"SECRET": secret, "KEY": key}}
    try:
        with pytest.raises(provision.ProvisionError, match="answered 422") as caught:
            rest.send(provision.ApiCall("POST", rest.url("templates"), template))
    finally:
        rest.close()
    assert secret not in str(caught.value) and key not in str(caught.value)


def test_a_runpod_secret_reference_is_sent_instead_of_the_key(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env["POPCON_RUNPOD_S3_SECRET_NAME"] = "popcon_s3"
    code, out = invoke(env, monkeypatch, "deploy", "--dry-run")
    assert code == 0 and '"POPCON_S3_SECRET_ACCESS_KEY": "{{ RUNPOD_SECRET_popcon_s3 }}"' in out


def test_deploy_refuses_to_guess_between_two_endpoints_of_the_same_name(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runpod.endpoints.update({ident: {"id": ident, "name": "popcon-matting"} for ident in ("ep1", "ep2")})
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 1 and "2 endpoints are named 'popcon-matting' (ep1, ep2)" in out, out
    assert runpod.writes() == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"POPCON_RUNPOD_API_KEY": "rpa_wrong"}, "RunPod refused the API key (401"),
        ({"POPCON_RUNPOD_API_KEY": ""}, "no RunPod API key: set POPCON_RUNPOD_API_KEY"),
        ({"POPCON_RUNPOD_IMAGE": ""}, "POPCON_RUNPOD_IMAGE is empty"),
        ({"POPCON_RUNPOD_REST_URL": f"http://127.0.0.1:{unused_port()}/v2"}, "no network: could not reach 127.0.0.1"),
    ],
)
def test_deploy_failures_exit_1_with_the_reason(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, change: dict[str, str], message: str
) -> None:
    env.update(change)
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 1 and message in out, out
    assert runpod.writes() == [] and not runpod.templates


# --- smoke -------------------------------------------------------------------------------------------------------


def deployed(runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    [endpoint_id] = runpod.endpoints
    env["POPCON_RUNPOD_ENDPOINT_ID"] = endpoint_id
    return endpoint_id


def test_smoke_sends_a_frame_through_the_shared_store(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    code, out = invoke(env, monkeypatch, "smoke")
    assert code == 0, out
    assert (
        "smoke test passed" in out
        and f"matte s3://{BUCKET}/smoke-root/sets/popcon-smoke-" in out
        and "queue 120 ms" in out
    )
    [job] = runpod.jobs.values()
    assert job["input"]["op"] == "matte" and job["input"]["inline_source"] is None
    assert job["policy"] == {"executionTimeout": 120_000, "ttl": 1_200_000}


def test_smoke_carries_the_frame_inline_without_a_shared_store(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    deployed(runpod, env, monkeypatch)
    env["POPCON_ARTIFACT_ROOT"] = (tmp_path / "local").as_uri()
    code, out = invoke(env, monkeypatch, "smoke")
    assert code == 0, out
    assert "smoke test passed" in out and "inline" in out
    [job] = runpod.jobs.values()
    assert job["input"]["inline_source"] and job["output"]["inline_matte"]
    code, out = invoke(env, monkeypatch, "smoke", "--store")
    assert code == 1 and "RunPod workers cannot read file://" in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"POPCON_RUNPOD_API_KEY": "rpa_wrong"}, "RunPod refused the API key (401)"),
        ({"POPCON_RUNPOD_ENDPOINT_ID": "nosuchendpoint"}, "RunPod has no endpoint nosuchendpoint (404)"),
        ({"POPCON_RUNPOD_ENDPOINT_ID": ""}, "no endpoint: set POPCON_RUNPOD_ENDPOINT_ID"),
        ({"POPCON_RUNPOD_BASE_URL": f"http://127.0.0.1:{unused_port()}/queue"}, "no network: could not reach"),
    ],
)
def test_smoke_cannot_reach_the_endpoint(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, change: dict[str, str], message: str
) -> None:
    deployed(runpod, env, monkeypatch)
    env.update(change)
    code, out = invoke(env, monkeypatch, "smoke")
    assert code == 1 and message in out, out
    assert KEY not in out


def test_smoke_reports_a_failed_job_with_its_typed_error(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    code, out = invoke(env, monkeypatch, "smoke", "--pipeline", "nosuchengine")
    assert code == 1 and "FAILED: UnknownPipeline:" in out and "throttled 1" in out, out


def test_smoke_cancels_a_job_that_does_not_finish_in_time(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    runpod.job_mode = "stuck"
    code, out = invoke(env, monkeypatch, "smoke", "--timeout", "0.2")
    assert code == 1 and "still IN_QUEUE after 0 s, cancelled" in out and "throttled 1" in out, out
    [job] = runpod.jobs.values()
    assert job["status"] == "CANCELLED"


def test_smoke_rejects_an_answer_outside_the_contract(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    runpod.job_mode = "garbage"
    code, out = invoke(env, monkeypatch, "smoke")
    assert code == 1 and "does not fit the matting contract" in out, out


def test_smoke_never_prints_a_key_runpod_quotes_in_a_refusal(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    runpod.echo_key_in_refusals = True
    wrong_key = f"wrong-{uuid.uuid4().hex}"
    env["POPCON_RUNPOD_API_KEY"] = wrong_key
    code, out = invoke(env, monkeypatch, "smoke", "--inline")
    assert code == 1 and "RunPod refused the API key (401)" in out and f"invalid bearer token: {REDACTED}" in out, out
    assert wrong_key not in out


def test_smoke_never_prints_a_key_the_endpoint_reports(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    runpod.job_mode = "leaky"
    code, out = invoke(env, monkeypatch, "smoke", "--inline")
    reported = f"RunPodJobFailed: the handler crashed with its environment: RUNPOD_API_KEY {REDACTED}"
    assert code == 1 and f"FAILED: {reported}" in out, out
    assert KEY not in out
