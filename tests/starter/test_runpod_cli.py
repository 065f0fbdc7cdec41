"""``popcon runpod deploy`` and ``popcon runpod smoke`` against a stand-in of RunPod's APIs on 127.0.0.1.

The stand-in (:mod:`testkit.runpod_management`) answers like the documented APIs: the REST API v2 (templates,
serverless endpoints and the GPU catalogue; every body held to RunPod's published schema, 422 otherwise) and an
endpoint's queue API, whose jobs run the real RunPod handler (:class:`MattingHandler`, classical pipeline) on the
first status request, as RunPod's local test server does. What RunPod or the endpoint says may quote a secret: the
CLI never prints one.
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Iterator
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
from gpu_activity_worker.runpod import disk, provision
from gpu_activity_worker.runpod.handler import MattingHandler
from starter.runpod_cli import app
from testkit.runpod_management import FakeRunPod, schema_errors, serving
from testkit.s3 import s3_server

KEY = "rpa_TESTKEY0123456789"
S3_SECRET = "s3-secret-never-printed"
BUCKET = "emoji"
CATALOGUE_QUERY = "include=AVAILABILITY&product=SERVERLESS&minCudaVersion=13.0"
SEED = {
    "POPCON_RUNPOD_GPU_POOLS": '["AMPERE_24"]',
    "POPCON_RUNPOD_GPU_EXCLUDED_TYPES": '["NVIDIA L4", "NVIDIA GeForce RTX 3090"]',
    "POPCON_RUNPOD_WORKERS": "3",
    "POPCON_RUNPOD_IDLE_TIMEOUT_S": "30",
}
"""The seed's endpoint: RTX A5000 only (its pool without the L4 and the 3090), at most 3 workers, idle 30 s."""


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
        "POPCON_RUNPOD_PIPELINES": '["classical"]',
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
    with serving(FakeRunPod(handler, api_key=KEY)) as fake:
        env.update(POPCON_RUNPOD_REST_URL=f"{fake.base_url}/v2", POPCON_RUNPOD_BASE_URL=f"{fake.base_url}/queue")
        yield fake
    handler.close()


def invoke(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def written(out: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The writes a dry run printed: method, URL and JSON body of each."""
    calls = re.findall(r"^(POST|PATCH) (\S+)\n(\{.*?^\})$", out, re.MULTILINE | re.DOTALL)
    return [(method, url, json.loads(body)) for method, url, body in calls]


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
    assert [(r.method, r.path) for r in runpod.requests] == [
        ("GET", "/v2/templates"),
        ("GET", "/v2/serverless"),
        ("GET", f"/v2/catalog/gpus?{CATALOGUE_QUERY}"),
    ]
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
        "excludedTypes": [],
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


@pytest.mark.parametrize("command", ["deploy", "smoke"])
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"POPCON_RUNPOD_TTL_MS": "1200000"}, "error: POPCON_RUNPOD_TTL_MS is 1200000 ms; it must be at least"),
        ({"POPCON_RUNPOD_WORKERS": "0"}, "error: POPCON_RUNPOD_WORKERS: Input should be greater than or equal to 1"),
    ],
)
def test_a_setting_out_of_bounds_exits_1_naming_the_variable(
    runpod: FakeRunPod,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    change: dict[str, str],
    message: str,
) -> None:
    env.update(change)
    code, out = invoke(env, monkeypatch, command)
    assert code == 1 and message in out and "Traceback" not in out, out
    assert runpod.writes() == []


def test_the_seeds_configuration_pins_the_rtx_a5000_and_its_dry_run_fits_runpods_schema(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env.update(SEED)
    code, out = invoke(env, monkeypatch, "deploy", "--dry-run")
    assert code == 0, out
    [(_, _, template), (_, _, endpoint)] = written(out)
    assert schema_errors("CreateTemplateRequest", template) == []
    assert schema_errors("CreateEndpointRequest", endpoint) == []
    assert endpoint["gpu"]["pools"] == ["AMPERE_24"]
    assert endpoint["gpu"]["excludedTypes"] == ["NVIDIA L4", "NVIDIA GeForce RTX 3090"]
    assert endpoint["workers"] == {"min": 0, "max": 3, "idleTimeout": 30}
    assert "GPU NVIDIA RTX A5000 (AMPERE_24): CUDA 13.0; free now on 13.0" in out
    assert "NVIDIA L4 (" not in out, "the excluded types are not offered"

    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    [endpoint_id] = runpod.endpoints
    code, out = invoke(env, monkeypatch, "deploy", "--dry-run")
    [(_, _, template), (_, url, update)] = written(out)
    assert url.endswith(f"/v2/serverless/{endpoint_id}")
    assert schema_errors("UpdateTemplateRequest", template) == []
    assert schema_errors("UpdateEndpointRequest", update) == []


def test_exclusions_set_in_the_console_survive_an_update_unless_the_settings_name_others(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env["POPCON_RUNPOD_GPU_POOLS"] = '["AMPERE_24"]'
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    [endpoint_id] = runpod.endpoints
    runpod.endpoints[endpoint_id]["gpu"]["excludedTypes"] = ["NVIDIA L4"]  # an operator's change in the console

    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    assert runpod.writes()[-1].body["gpu"]["excludedTypes"] == ["NVIDIA L4"], "sent with the pools, not cleared"
    assert runpod.endpoints[endpoint_id]["gpu"]["excludedTypes"] == ["NVIDIA L4"]
    assert "GPU types kept out, as the endpoint had them: NVIDIA L4" in out

    env["POPCON_RUNPOD_GPU_POOLS"] = '["ADA_24"]'  # the carried exclusion is no type of the new pool
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    gpu = runpod.endpoints[endpoint_id]["gpu"]
    assert (gpu["pools"], gpu["excludedTypes"]) == (["ADA_24"], [])
    assert "exclusions dropped, no longer in the pools: NVIDIA L4" in out

    env.update(POPCON_RUNPOD_GPU_POOLS='["AMPERE_24"]', POPCON_RUNPOD_GPU_EXCLUDED_TYPES="[]")
    runpod.endpoints[endpoint_id]["gpu"]["excludedTypes"] = ["NVIDIA L4"]
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0 and runpod.endpoints[endpoint_id]["gpu"]["excludedTypes"] == [], "an explicit [] clears them"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"POPCON_RUNPOD_GPU_POOLS": '["AMPERE_42"]'},
            "POPCON_RUNPOD_GPU_POOLS: RunPod has no serverless GPU pool 'AMPERE_42'; its pools: ADA_24: NVIDIA GeForce "
            "RTX 4090; AMPERE_16: NVIDIA RTX A4000; AMPERE_24: NVIDIA L4, NVIDIA RTX A5000, NVIDIA GeForce RTX 3090",
        ),
        (
            {"POPCON_RUNPOD_GPU_POOLS": '["AMPERE_24"]', "POPCON_RUNPOD_GPU_EXCLUDED_TYPES": '["RTX A5000"]'},
            "POPCON_RUNPOD_GPU_EXCLUDED_TYPES: 'RTX A5000' is not a GPU type of the pools (AMPERE_24: NVIDIA L4, "
            "NVIDIA RTX A5000, NVIDIA GeForce RTX 3090)",
        ),
        (
            {
                "POPCON_RUNPOD_GPU_POOLS": '["ADA_24"]',
                "POPCON_RUNPOD_GPU_EXCLUDED_TYPES": '["NVIDIA GeForce RTX 4090"]',
            },
            "POPCON_RUNPOD_GPU_EXCLUDED_TYPES takes every GPU type out of the pools (ADA_24: NVIDIA GeForce RTX 4090)",
        ),
        (
            {
                "POPCON_RUNPOD_GPU_POOLS": '["AMPERE_24", "AMPERE_16"]',
                "POPCON_RUNPOD_GPU_EXCLUDED_TYPES": '["NVIDIA L4", "NVIDIA RTX A5000"]',
            },
            "none of the chosen GPUs (NVIDIA GeForce RTX 3090, NVIDIA RTX A4000) runs serverless workers on CUDA 13.0 "
            "or newer, which the image needs",
        ),
    ],
    ids=["unknown-pool", "exclusion-outside-the-pools", "nothing-left", "no-cuda-13"],
)
def test_a_gpu_choice_the_catalogue_shows_cannot_run_the_image_is_refused_before_any_write(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, change: dict[str, str], message: str
) -> None:
    env.update(change)
    for args in (["deploy", "--dry-run"], ["deploy"]):
        code, out = invoke(env, monkeypatch, *args)
        assert code == 1 and message in out, out
    assert runpod.writes() == []


def test_a_gpu_whose_cuda_13_machines_are_all_busy_is_deployed_and_said_so(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env["POPCON_RUNPOD_GPU_POOLS"] = '["ADA_24"]'
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 0, out
    assert "GPU NVIDIA GeForce RTX 4090 (ADA_24): CUDA 13.0; all busy now: workers wait until one frees up" in out


@pytest.mark.parametrize(
    ("status", "message"),
    [(503, "answered 503: catalog is down"), (429, "answered 429: rate limit exceeded")],
)
def test_a_catalogue_that_does_not_answer_stops_the_deploy(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, status: int, message: str
) -> None:
    runpod.catalogue_failure = status
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 1 and f"GET {runpod.base_url}/v2/catalog/gpus?{CATALOGUE_QUERY} {message}" in out, out
    assert runpod.writes() == []


def test_the_container_disk_is_sized_from_the_image_and_a_smaller_one_is_refused(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    needed = disk.container_disk_needed_gb(disk.IMAGE_SIZE_GB)
    free = 1 - (disk.IMAGE_SIZE_GB + disk.WORK_ROOM_GB) / needed
    assert free >= disk.MIN_FREE_FRACTION, "the default leaves RunPod's 10% free with the image and its work room"
    code, out = invoke(env, monkeypatch, "deploy", "--dry-run")
    [(_, _, template), _] = written(out)
    assert template["disk"] == needed

    env["POPCON_RUNPOD_CONTAINER_DISK_GB"] = str(needed - 1)
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 1, out
    assert f"POPCON_RUNPOD_CONTAINER_DISK_GB={needed - 1} is too small: the image ({disk.IMAGE_SIZE_GB:g} GB" in out
    assert f"need {needed} GB, so that RunPod's start-up check finds 10% of the disk free" in out
    env.update(POPCON_RUNPOD_CONTAINER_DISK_GB="30", POPCON_RUNPOD_IMAGE_SIZE_GB="30")
    code, out = invoke(env, monkeypatch, "deploy")
    assert code == 1 and "POPCON_RUNPOD_CONTAINER_DISK_GB=30 is too small" in out and "need 36 GB" in out, out
    assert runpod.writes() == []

    del env["POPCON_RUNPOD_CONTAINER_DISK_GB"]
    monkeypatch.delenv("POPCON_RUNPOD_CONTAINER_DISK_GB")
    code, out = invoke(env, monkeypatch, "deploy", "--dry-run")
    [(_, _, template), _] = written(out)
    assert code == 0 and template["disk"] == 36, "unset, the disk follows the image's size"


@pytest.mark.parametrize(
    ("collection", "body", "error"),
    [
        ("templates", {"name": "t", "image": "i", "disk": 0}, "$.disk: 0 is less than the minimum of 1"),
        ("templates", {"name": "t"}, "'image' is a required property"),
        (
            "serverless",
            {"name": "e", "type": "QUEUE", "templateId": "t", "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
             "gpu": {"pools": ["AMPERE_24"], "gpuTypeIds": ["NVIDIA RTX A5000"]}},
            "('gpuTypeIds' was unexpected)",
        ),
        (
            "serverless",
            {"name": "e", "type": "QUEUE", "templateId": "t", "scaling": {"type": "QUEUE_DELAY", "queueDelay": 4},
             "workers": {"max": 3, "idleTimeout": 0}},
            "$.workers.idleTimeout: 0 is less than the minimum of 1",
        ),
    ],
    ids=["disk-zero", "no-image", "v1-gpu-type-ids", "idle-zero"],
)  # fmt: skip
def test_the_stand_in_refuses_what_runpods_schema_refuses(
    runpod: FakeRunPod, collection: str, body: dict[str, Any], error: str
) -> None:
    rest = provision.RunPodRest(f"{runpod.base_url}/v2", SecretStr(KEY))
    try:
        with pytest.raises(provision.ProvisionError, match="answered 422: validation failed") as caught:
            rest.send(provision.ApiCall("POST", rest.url(collection), body))
    finally:
        rest.close()
    assert error in str(caught.value)


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
    assert job["policy"] == {"executionTimeout": 120_000, "ttl": 3_600_000}


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


def test_smoke_sends_a_job_through_each_pipeline_the_image_serves(
    runpod: FakeRunPod, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed(runpod, env, monkeypatch)
    env["POPCON_RUNPOD_PIPELINES"] = '["classical", "floodfill"]'
    code, out = invoke(env, monkeypatch, "smoke")
    assert code == 0, out
    assert [job["input"]["request"]["pipeline"] for job in runpod.jobs.values()] == ["classical", "floodfill"]
    assert "pipeline classical on cpu" in out and "pipeline floodfill on cpu" in out

    env["POPCON_RUNPOD_PIPELINES"] = '["rembg:isnet-anime", "classical"]'  # the endpoint lacks the weights of one
    code, out = invoke(env, monkeypatch, "smoke")
    assert code == 1, out
    assert "error: pipeline rembg:isnet-anime: job " in out and "FAILED: WeightsMissing" in out, out
    assert "smoke test passed: job" in out and "pipeline classical on cpu" in out, "every pipeline is tried"

    code, out = invoke(env, monkeypatch, "smoke", "--pipeline", "floodfill")
    assert code == 0 and out.count("smoke test passed") == 1 and "pipeline floodfill" in out, out


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
