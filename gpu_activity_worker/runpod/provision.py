"""RunPod provisioning: deploy the matting endpoint, and smoke-test it with one real frame.

:func:`deploy` creates or updates, found by name, a serverless *template* (the GPU image, its start argument, disk
and the handler's environment) and a queue *endpoint* built from it (GPU pools and excluded types, workers, idle
timeout, FlashBoot, execution timeout): a second run updates both instead of duplicating them. Before it writes, it
checks the GPU choice against RunPod's GPU catalogue (:mod:`~gpu_activity_worker.runpod.gpu_choice`) and the
container disk against the image's size (:mod:`~gpu_activity_worker.runpod.disk`). A dry run only reads (the two
lists it needs to choose between create and update, and the catalogue) and returns the writes it would have sent.

:func:`smoke` sends one small frame through the endpoint's queue as a matting job (``/run``, then ``/status`` until
the job ends) and checks the answer: the output must validate as the handler's :class:`MatteJobOutput` (the
``matte_frame`` activity's own result), and the matte must be readable and cut the test subject out. The frame goes
through the shared ``s3://`` artifact store when there is one, else inline in the job, as the dispatcher does.

RunPod API facts relied on (docs.runpod.io/api-reference-v2, OpenAPI at api.runpod.io/v2/openapi.json):
management base ``https://api.runpod.io/v2`` with ``Authorization: Bearer <key>``; ``GET|POST /templates``,
``PATCH /templates/{id}``, ``GET|POST /serverless``, ``PATCH /serverless/{id}``, ``GET /catalog/gpus``; lists come
wrapped (``{"templates": [...]}``, ``{"endpoints": [...]}``, ``{"gpus": [...]}``); errors are RFC 9457 problems
(``title``, ``status``, ``detail``, ``errors``); testkit/runpod_v2_schema.json keeps the published schema of these
bodies, which the tests hold every request to. An endpoint keeps a snapshot of its template: a PATCH carrying
``templateId`` re-applies the template's container settings and replaces the endpoint's env. REST v1
(``rest.runpod.io/v1``) was retired on 2026-11-15 and the GraphQL API (behind runpod 1.12's
``create_template``/``create_endpoint``) retires in early 2027, so neither is used. The queue API is
``https://api.runpod.ai/v2/{endpoint id}`` (``/health``, ``/run``, ``/status/{job}``, ``/cancel/{job}``).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
from PIL import Image, UnidentifiedImageError
from pydantic import SecretStr, ValidationError

from core.artifacts import ArtifactError, ArtifactStore, open_store
from core.redact import REDACTED, redact, register_secret
from core.settings import ArtifactSettings
from gpu_activity_worker.runpod import gpu_choice
from gpu_activity_worker.runpod.api import JobStatus, RunPodApi, RunPodApiError
from gpu_activity_worker.runpod.disk import MIN_FREE_FRACTION, WORK_ROOM_GB, container_disk_needed_gb
from gpu_activity_worker.runpod.jobs import (
    INLINE_SCHEME,
    MatteJob,
    MatteJobOutput,
    decode_inline,
    encode_inline,
    parse_job_error,
)
from gpu_activity_worker.runpod.settings import RunPodSettings
from gpu_activity_worker.settings import GpuWorkerSettings
from gpu_activity_worker.smoke_frame import cut_out_problem, smoke_frame
from workflows.contract import ArtifactRef, MatteFrameInput, MatteFrameOutput
from workflows.keys import candidate_key

SECRET_ENV = frozenset({"POPCON_S3_SECRET_ACCESS_KEY"})
"""Environment variables of the endpoint whose values are never printed."""
QUEUE_SCALING: dict[str, Any] = {"type": "QUEUE_DELAY", "queueDelay": 4}
"""Add a worker once a job has waited 4 s in the queue (the value RunPod's documentation uses)."""


class ProvisionError(Exception):
    """A deploy or smoke step failed; the message says what happened and what to change."""


def _secret_reference(name: str) -> str:
    """How a RunPod template refers to one of the account's secrets (resolved when a worker starts)."""
    return "{{ RUNPOD_SECRET_" + name + " }}"


def redacted(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a request body in which secret environment values read ``[redacted]`` (secret references stay)."""
    env = body.get("env")
    if not isinstance(env, Mapping):
        return dict(body)
    shown = {
        key: REDACTED if key in SECRET_ENV and not str(value).startswith("{{ RUNPOD_SECRET_") else value
        for key, value in env.items()
    }
    return {**body, "env": shown}


@dataclass(frozen=True)
class ApiCall:
    """One request to RunPod: what a dry run prints and what deploy sends."""

    method: str
    url: str
    body: Mapping[str, Any] | None = None

    def describe(self) -> str:
        """``METHOD URL`` and the JSON body with secret values redacted: safe to print or log."""
        if self.body is None:
            return f"{self.method} {self.url}"
        return f"{self.method} {self.url}\n{json.dumps(redacted(self.body), indent=2)}"


def api_key(settings: RunPodSettings) -> SecretStr:
    """The RunPod API key.

    Raises:
        ProvisionError: None is configured.
    """
    key = settings.runpod_api_key
    if key is None or not key.get_secret_value():
        raise ProvisionError("no RunPod API key: set POPCON_RUNPOD_API_KEY (RunPod console > Settings > API Keys)")
    return key


def _no_network(url: str, err: Exception) -> str:
    return f"no network: could not reach {urlparse(url).hostname} ({type(err).__name__}: {err})"


def _refusal(method: str, url: str, status: int, detail: str) -> str:
    """A clear message for an error answer: a refused key and missing rights say what to change."""
    if status == 401:
        return f"RunPod refused the API key (401 on {method} {url}): check POPCON_RUNPOD_API_KEY"
    if status == 403:
        return f"the API key may not {method} {url} (403): give it read/write access to Serverless"
    return f"{method} {url} answered {status}: {detail}"


def _problem(answer: httpx.Response) -> str:
    """The readable part of an error answer: RFC 9457 ``detail`` and ``errors``, else the body's start."""
    try:
        problem = answer.json()
    except ValueError:
        return answer.text[:300] or answer.reason_phrase
    if not isinstance(problem, dict):
        return str(problem)[:300]
    parts = [str(problem.get("detail") or problem.get("title") or problem.get("message") or problem.get("error") or "")]
    parts += [str(error) for error in problem.get("errors") or []]
    return "; ".join(part for part in parts if part) or answer.reason_phrase


class RunPodRest:
    """RunPod's management API (REST v2): list, create and update templates and serverless endpoints.

    Args:
        base_url: e.g. ``https://api.runpod.io/v2``.
        api_key: Sent as a Bearer token; never printed.
        secrets: Other secret values to scrub from error messages (those inside request bodies).

    The key and the other ``secrets`` are registered with :func:`core.redact.register_secret`; RunPod's answers are
    redacted before they become an error message.
    """

    def __init__(
        self, base_url: str, api_key: SecretStr, *, timeout_s: float = 30.0, secrets: Sequence[str] = ()
    ) -> None:
        self.base_url = base_url.rstrip("/")
        register_secret(api_key)
        for secret in secrets:
            register_secret(secret)
        self._http = httpx.Client(headers={"Authorization": f"Bearer {api_key.get_secret_value()}"}, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path}"

    def _send(self, call: ApiCall) -> Any:
        try:
            answer = self._http.request(call.method, call.url, json=call.body)
        except httpx.TransportError as err:
            raise ProvisionError(_no_network(call.url, err)) from err
        if answer.is_error:
            detail = redact(_problem(answer))
            raise ProvisionError(_refusal(call.method, call.url, answer.status_code, detail))
        return answer.json() if answer.content else None

    def list(self, collection: str) -> list[dict[str, Any]]:
        """Every item of ``templates`` or ``serverless`` the key's account owns."""
        answer = self._send(ApiCall("GET", self.url(collection)))
        key = "endpoints" if collection == "serverless" else collection
        items = answer.get(key) if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise ProvisionError(f"GET {self.url(collection)} answered without a {key!r} list: {str(answer)[:200]}")
        return items

    def gpu_catalogue(self, min_cuda: str) -> Sequence[dict[str, Any]]:
        """Every GPU type, with the CUDA versions its serverless machines offer from ``min_cuda`` on."""
        query = f"include=AVAILABILITY&product=SERVERLESS&minCudaVersion={min_cuda}"
        answer = self._send(ApiCall("GET", self.url(f"catalog/gpus?{query}")))
        gpus = answer.get("gpus") if isinstance(answer, dict) else None
        if not isinstance(gpus, list):
            raise ProvisionError(f"GET {self.url('catalog/gpus')} answered without a 'gpus' list: {str(answer)[:200]}")
        return gpus

    def send(self, call: ApiCall) -> dict[str, Any]:
        """Send a create or update; returns the resource RunPod answers with."""
        answer = self._send(call)
        if not isinstance(answer, dict) or "id" not in answer:
            raise ProvisionError(f"{call.method} {call.url} answered without an id: {str(answer)[:200]}")
        return answer


@dataclass(frozen=True)
class Deployment:
    """What deploy makes: the template's body and the endpoint's settings (its template id is added on sending)."""

    template: dict[str, Any]
    endpoint: dict[str, Any]
    excluded_types: tuple[str, ...] | None = None
    """GPU types taken out of the pools; ``None`` keeps those the endpoint has."""
    secrets: tuple[str, ...] = ()
    """Secret values inside the bodies, scrubbed from any error text."""


def handler_environment(
    settings: RunPodSettings, matting: GpuWorkerSettings, artifacts: ArtifactSettings, *, log_level: str
) -> dict[str, str]:
    """The environment of the RunPod handler: its knobs, and the artifact store when RunPod can reach it.

    With an ``s3://`` artifact root the workers share the store; with a ``file://`` root they get none and every
    job carries its image inline. The model folder is not sent: the image bakes its weights into its own
    ``POPCON_MODEL_DIR``, and this machine's folder means nothing there.
    """
    env = {
        "POPCON_MATTING_DEVICE": "cuda",
        "POPCON_MATTING_MAX_BATCH": str(matting.matting_max_batch),
        "POPCON_MATTING_BATCH_WAIT_MS": str(matting.matting_batch_wait_ms),
        "POPCON_LOG_LEVEL": log_level,
        "POPCON_RUNPOD_HANDLER_CONCURRENCY": str(settings.runpod_handler_concurrency),
        "POPCON_RUNPOD_PRELOAD_PIPELINE": settings.runpod_preload_pipeline,
        "POPCON_RUNPOD_INLINE_MAX_BYTES": str(settings.runpod_inline_max_bytes),
    }
    if not artifacts.is_shared():
        return env
    secret = artifacts.s3_secret_access_key
    if settings.runpod_s3_secret_name:
        secret_value = _secret_reference(settings.runpod_s3_secret_name)
    else:
        secret_value = secret.get_secret_value() if secret else ""
    store = {
        "POPCON_ARTIFACT_ROOT": artifacts.artifact_root_uri(),
        "POPCON_S3_ENDPOINT_URL": artifacts.s3_endpoint_url or "",
        "POPCON_S3_ACCESS_KEY_ID": artifacts.s3_access_key_id or "",
        "POPCON_S3_SECRET_ACCESS_KEY": secret_value,
        "POPCON_S3_REGION": artifacts.s3_region or "",
    }
    return env | {key: value for key, value in store.items() if value}


def deployment_from(
    settings: RunPodSettings, matting: GpuWorkerSettings, artifacts: ArtifactSettings, *, log_level: str
) -> Deployment:
    """The template and endpoint the settings describe.

    Raises:
        ProvisionError: No image is set, or the container disk is too small for it.
    """
    if not settings.runpod_image:
        raise ProvisionError(
            "POPCON_RUNPOD_IMAGE is empty: set the GPU image the endpoint runs (built from docker/gpu.Dockerfile)"
        )
    needed, disk = container_disk_needed_gb(settings.runpod_image_size_gb), settings.container_disk_gb()
    if disk < needed:
        raise ProvisionError(
            f"POPCON_RUNPOD_CONTAINER_DISK_GB={disk} is too small: the image "
            f"({settings.runpod_image_size_gb:g} GB unpacked, POPCON_RUNPOD_IMAGE_SIZE_GB) and {WORK_ROOM_GB:g} GB to "
            f"work in need {needed} GB, so that RunPod's start-up check finds {MIN_FREE_FRACTION:.0%} of the disk free"
        )
    template = {
        "name": settings.runpod_template_name,
        "image": settings.runpod_image,
        "args": "handler",
        "disk": disk,
        "env": handler_environment(settings, matting, artifacts, log_level=log_level),
        "ports": [],
        "serverless": True,
        "public": False,
        "category": "NVIDIA",
        "startSsh": False,
        "startJupyter": False,
    }
    endpoint = {
        "name": settings.runpod_endpoint_name,
        "type": "QUEUE",
        # An explicit empty set beside the floor clears a CUDA set an earlier version of the endpoint may carry.
        "gpu": {
            "pools": list(settings.runpod_gpu_pools),
            "count": 1,
            "minCudaVersion": settings.runpod_min_cuda_version,
            "allowedCudaVersions": [],
        },
        "workers": {
            "min": settings.runpod_min_workers,
            "max": settings.runpod_workers,
            "idleTimeout": settings.runpod_idle_timeout_s,
        },
        "scaling": dict(QUEUE_SCALING),
        "timeout": settings.runpod_execution_timeout_ms,
        "flashboot": "FLASHBOOT" if settings.runpod_flashboot else "OFF",
    }
    secret = artifacts.s3_secret_access_key
    excluded = settings.runpod_gpu_excluded_types
    return Deployment(
        template,
        endpoint,
        excluded_types=None if excluded is None else tuple(excluded),
        secrets=(secret.get_secret_value(),) if secret else (),
    )


@dataclass
class DeployResult:
    """What deploy did (or, in a dry run, would do)."""

    calls: list[ApiCall] = field(default_factory=list)
    """The writes, in order: sent, or only planned in a dry run."""
    checks: list[str] = field(default_factory=list)
    """What the checks before the writes found: the GPUs workers may start on, exclusions carried or dropped."""
    summary: list[str] = field(default_factory=list)
    template_id: str = ""
    endpoint_id: str = ""
    run_url: str = ""


def _named(items: list[dict[str, Any]], name: str, kind: str) -> dict[str, Any] | None:
    matches = [item for item in items if item.get("name") == name]
    if len(matches) > 1:
        ids = ", ".join(str(item.get("id")) for item in matches)
        raise ProvisionError(f"{len(matches)} {kind}s are named {name!r} ({ids}): delete or rename all but one")
    return matches[0] if matches else None


def _gpu(
    rest: RunPodRest, deployment: Deployment, endpoint: Mapping[str, Any] | None, result: DeployResult
) -> dict[str, Any]:
    """The endpoint's ``gpu`` block with its exclusions (the settings', else the endpoint's own), checked against the
    catalogue; notes where workers can run in ``result.checks``."""
    gpu = dict(deployment.endpoint["gpu"])
    catalogue = rest.gpu_catalogue(gpu["minCudaVersion"])
    excluded = deployment.excluded_types
    if excluded is None:
        current = (endpoint or {}).get("gpu") or {}
        excluded, dropped = gpu_choice.carried_exclusions(catalogue, gpu["pools"], current.get("excludedTypes") or [])
        if excluded:
            result.checks.append(f"GPU types kept out, as the endpoint had them: {', '.join(excluded)}")
        if dropped:
            result.checks.append(f"exclusions dropped, no longer in the pools: {', '.join(dropped)}")
    try:
        choice = gpu_choice.check(catalogue, gpu["pools"], excluded, gpu["minCudaVersion"])
    except gpu_choice.GpuChoiceError as err:
        raise ProvisionError(str(err)) from err
    result.checks += [f"GPU {line}" for line in choice.report]
    return {**gpu, "excludedTypes": list(choice.excluded)}


def deploy(rest: RunPodRest, deployment: Deployment, *, dry_run: bool = False) -> DeployResult:
    """Create or update the template, then the endpoint built from it; idempotent (both are found by name).

    The GPU choice is checked against RunPod's catalogue first; an update sends the exclusions with the pools (RunPod
    clears exclusions an update's pools come without), the settings' or else the endpoint's own.

    Raises:
        ProvisionError: No network, a refused key, an API error, two resources with the wanted name, or a GPU choice
            the catalogue shows cannot run the image.
    """
    result = DeployResult()
    template_name = deployment.template["name"]
    endpoint_name = deployment.endpoint["name"]
    template = _named(rest.list("templates"), template_name, "template")
    endpoint = _named(rest.list("serverless"), endpoint_name, "endpoint")
    endpoint_body = {**deployment.endpoint, "gpu": _gpu(rest, deployment, endpoint, result)}

    if template is None:
        template_call = ApiCall("POST", rest.url("templates"), deployment.template)
    else:
        template_call = ApiCall("PATCH", rest.url(f"templates/{template['id']}"), deployment.template)
    result.calls.append(template_call)
    if dry_run:
        result.template_id = str(template["id"]) if template else f"<id of the new template {template_name}>"
    else:
        result.template_id = str(rest.send(template_call)["id"])
    result.summary.append(f"template {template_name} {'updated' if template else 'created'}: {result.template_id}")

    if endpoint is None:
        endpoint_call = ApiCall("POST", rest.url("serverless"), {**endpoint_body, "templateId": result.template_id})
    else:
        # The routing type cannot change and is not accepted in an update; templateId re-applies image and env.
        changes = {key: value for key, value in endpoint_body.items() if key != "type"}
        endpoint_call = ApiCall(
            "PATCH", rest.url(f"serverless/{endpoint['id']}"), {**changes, "templateId": result.template_id}
        )
    result.calls.append(endpoint_call)
    if dry_run:
        result.endpoint_id = str(endpoint["id"]) if endpoint else f"<id of the new endpoint {endpoint_name}>"
        answer = endpoint or {}
    else:
        answer = rest.send(endpoint_call)
        result.endpoint_id = str(answer["id"])
    urls = answer.get("requestUrls")
    result.run_url = str(urls.get("run", "")) if isinstance(urls, dict) else ""
    result.summary.append(f"endpoint {endpoint_name} {'updated' if endpoint else 'created'}: {result.endpoint_id}")
    return result


# --- Smoke test -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SmokeResult:
    job_id: str
    output: MatteFrameOutput
    inline: bool
    """True when the frame and its matte travelled inside the job (no shared store)."""
    delay_ms: float | None
    """Time in the queue, cold start included, as RunPod reports it."""
    execution_ms: float | None


def _queue_failure(err: RunPodApiError, endpoint_id: str) -> ProvisionError:
    """A clear message for a failed queue request: no network, refused key, unknown endpoint, other answers."""
    text = str(err)
    if err.status is None:
        return ProvisionError(f"no network: could not reach RunPod's queue API ({text})")
    if err.status == 401:
        return ProvisionError(f"RunPod refused the API key (401): check POPCON_RUNPOD_API_KEY ({text})")
    if err.status == 404:
        return ProvisionError(
            f"RunPod has no endpoint {endpoint_id} (404): check POPCON_RUNPOD_ENDPOINT_ID (`popcon runpod deploy` "
            "prints it)"
        )
    return ProvisionError(text)


def _workers(health: Mapping[str, Any]) -> str:
    workers = health.get("workers")
    if not isinstance(workers, dict) or not workers:
        return "no worker counts"
    return ", ".join(f"{state} {count}" for state, count in workers.items())


def _alpha(png: bytes, where: str) -> np.ndarray:
    try:
        with Image.open(io.BytesIO(png)) as image:
            return np.asarray(image.convert("RGBA"))[:, :, 3]
    except (UnidentifiedImageError, OSError) as err:
        raise ProvisionError(f"the matte {where} is not an image: {err}") from err


def check_output(raw: Any, request: MatteFrameInput, store: ArtifactStore | None) -> MatteFrameOutput:
    """The job output's matting result, after checking the matte itself.

    ``store`` is the shared artifact store, or None when the matte travels inline in the output.

    Raises:
        ProvisionError: The output does not fit :class:`MatteJobOutput`, or its matte is missing, corrupt, not where
            the request asked for it, or does not cut the test subject out (opaque centre, transparent corners).
    """
    try:
        output = MatteJobOutput.model_validate(raw)
    except ValidationError as err:
        raise ProvisionError(
            f"the job output does not fit the matting contract (an image older than this code?): {err}; "
            f"got {str(raw)[:300]}"
        ) from err
    matte = output.result.matte
    if not matte.uri.endswith(request.output_key):
        raise ProvisionError(f"the matte is at {matte.uri}, not under the requested key {request.output_key}")
    if store is None:
        if output.inline_matte is None:
            raise ProvisionError("the job sent its frame inline but the output carries no inline_matte")
        png = decode_inline(output.inline_matte, len(output.inline_matte), matte.uri)
        if hashlib.sha256(png).hexdigest() != matte.sha256:
            raise ProvisionError(f"the inline matte does not match its reference's sha256 {matte.sha256}")
    else:
        try:
            png = store.get(matte)
        except ArtifactError as err:
            raise ProvisionError(f"the endpoint's matte cannot be read back: {err}") from err
    alpha = _alpha(png, matte.uri)
    height, width = alpha.shape
    if (width, height) != (request.source.width, request.source.height):
        raise ProvisionError(f"the matte is {width}x{height}, the frame {request.source.width}x{request.source.height}")
    problem = cut_out_problem(alpha)
    if problem:
        raise ProvisionError(problem)
    return output.result


def _smoke_job(store: ArtifactStore | None, pipeline: str, inline_max_bytes: int) -> tuple[MatteFrameInput, MatteJob]:
    """The test frame's request, stored in the shared store or carried inline when there is none."""
    frame = smoke_frame()
    with Image.open(io.BytesIO(frame)) as image:
        width, height = image.size
    # A set of its own (a matting job writes only a frame candidate's cut-out, in the set of its source).
    set_id = f"popcon-smoke-{uuid.uuid4().hex}"
    source_key = candidate_key(set_id, "smoke", 0, 0, "source.png")
    if store is None:
        source = ArtifactRef(
            uri=f"{INLINE_SCHEME}{source_key}",
            sha256=hashlib.sha256(frame).hexdigest(),
            size_bytes=len(frame),
            media_type="image/png",
            width=width,
            height=height,
        )
        inline: str | None = encode_inline(frame, inline_max_bytes, "the test frame")
    else:
        try:
            source = store.put(source_key, frame, "image/png", width=width, height=height)
        except ArtifactError as err:
            raise ProvisionError(f"could not store the test frame: {err}") from err
        inline = None
    output_key = candidate_key(set_id, "smoke", 0, 0, "matte.png")
    request = MatteFrameInput(source=source, output_key=output_key, pipeline=pipeline)
    return request, MatteJob(op="matte", request=request, inline_source=inline)


async def smoke(
    api: RunPodApi,
    endpoint_id: str,
    store: ArtifactStore | None,
    *,
    pipeline: str,
    timeout_s: float,
    poll_interval_s: float,
    execution_timeout_ms: int,
    ttl_ms: int,
    inline_max_bytes: int,
) -> SmokeResult:
    """Send one real frame through the endpoint and check the answer (see the module docstring).

    ``store`` is the artifact store the endpoint shares (``s3://``), or None to carry the frame inline.

    Raises:
        ProvisionError: No network, a refused key, an unknown endpoint, a failed or cancelled job, no answer within
            ``timeout_s`` (the job is then cancelled), or an answer :func:`check_output` rejects.
    """
    request, job = _smoke_job(store, pipeline, inline_max_bytes)
    try:
        await api.health()
        report = await api.run(job.model_dump(mode="json"), execution_timeout_ms=execution_timeout_ms, ttl_ms=ttl_ms)
        deadline = time.monotonic() + timeout_s
        while not report.status.finished:
            if time.monotonic() >= deadline:
                await api.cancel(report.id)
                raise ProvisionError(
                    f"job {report.id} still {report.status.value} after {timeout_s:.0f} s, cancelled; endpoint "
                    f"workers: {_workers(await api.health())} (throttled = no free GPU in its pools, unhealthy = "
                    "see the worker logs in the RunPod console)"
                )
            await asyncio.sleep(poll_interval_s)
            report = await api.status(report.id)
        if report.status is not JobStatus.COMPLETED:
            kind, message = parse_job_error(report.error)
            raise ProvisionError(
                f"job {report.id} {report.status.value}: {kind}: {message} "
                f"(endpoint workers: {_workers(await api.health())})"
            )
    except RunPodApiError as err:
        raise _queue_failure(err, endpoint_id) from err
    return SmokeResult(
        job_id=report.id,
        output=check_output(report.output, request, store),
        inline=store is None,
        delay_ms=report.delay_ms,
        execution_ms=report.execution_ms,
    )


# --- From the settings (what `popcon runpod` runs) -----------------------------------------------------------------


def deploy_configured(
    settings: RunPodSettings,
    matting: GpuWorkerSettings,
    artifacts: ArtifactSettings,
    *,
    log_level: str,
    dry_run: bool = False,
) -> DeployResult:
    """:func:`deploy` the endpoint the settings describe, through the management API.

    Raises:
        ProvisionError: See :func:`deployment_from`, :func:`api_key` and :func:`deploy`.
    """
    deployment = deployment_from(settings, matting, artifacts, log_level=log_level)
    rest = RunPodRest(settings.runpod_rest_url, api_key(settings), secrets=deployment.secrets)
    try:
        return deploy(rest, deployment, dry_run=dry_run)
    finally:
        rest.close()


async def smoke_configured(
    settings: RunPodSettings, artifacts: ArtifactSettings, *, pipeline: str, timeout_s: float, inline: bool | None
) -> SmokeResult:
    """:func:`smoke`-test the configured endpoint.

    Args:
        settings: The endpoint, its key and the job policy.
        artifacts: The artifact store; the frame goes through it when it is shared (``s3://``).
        pipeline: The matting pipeline the endpoint runs on the test frame.
        timeout_s: Longest wait for the answer, cold start included.
        inline: Carry the frame inside the job (True), through the store (False), or the store if it is shared (None).

    Raises:
        ProvisionError: No endpoint or key, a store RunPod cannot read, or any failure of :func:`smoke`.
    """
    carry_inline = not artifacts.is_shared() if inline is None else inline
    if not settings.runpod_endpoint_id:
        raise ProvisionError("no endpoint: set POPCON_RUNPOD_ENDPOINT_ID (`popcon runpod deploy` prints it)")
    if not carry_inline and not artifacts.is_shared():
        raise ProvisionError(
            f"RunPod workers cannot read {artifacts.artifact_root_uri()}: use --inline, or an s3:// "
            "POPCON_ARTIFACT_ROOT the endpoint shares"
        )
    store = None if carry_inline else open_store(artifacts)
    api = RunPodApi(settings.runpod_base_url, settings.runpod_endpoint_id, api_key(settings))
    try:
        return await smoke(
            api,
            settings.runpod_endpoint_id,
            store,
            pipeline=pipeline,
            timeout_s=timeout_s,
            poll_interval_s=settings.runpod_poll_interval_s,
            execution_timeout_ms=settings.runpod_execution_timeout_ms,
            ttl_ms=settings.runpod_ttl_ms,
            inline_max_bytes=settings.runpod_inline_max_bytes,
        )
    finally:
        await api.aclose()
