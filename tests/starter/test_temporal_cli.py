"""The Temporal CLI alone (no project code) drives a set: start, query, update, signal, result. README shows these."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from temporalio.testing import WorkflowEnvironment

from starter.devstack import temporal_cli
from testkit.stack import Stack


async def temporal(address: str, *args: str) -> Any:
    process = await asyncio.create_subprocess_exec(
        str(temporal_cli()),
        *args,
        "--address",
        address,
        "--output",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return json.loads(out) if out.strip() else None


async def query_until(address: str, set_id: str, phase: str) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while True:
            answer = await temporal(address, "workflow", "query", "--workflow-id", set_id, "--name", "get_state")
            state: dict[str, Any] = answer["queryResult"][0]
            if state["phase"] == phase:
                return state
            await asyncio.sleep(0.2)


async def update(address: str, set_id: str, name: str, body: dict[str, Any]) -> Any:
    answer = await temporal(
        address, "workflow", "update", "execute", "--workflow-id", set_id, "--name", name, "--input", json.dumps(body)
    )
    return answer["result"]


async def test_the_temporal_cli_drives_a_set(dev_server: WorkflowEnvironment, stack: Stack, set_id: str) -> None:
    address = dev_server.client.service_client.config.target_host
    request = {
        "character_prompt": "a yellow duck",
        "actions": ["wave"],
        "frames_per_emoji": 2,
        "clip_seconds": 1,
        "clip_fps": 8,
        "image_size": 64,
    }
    await temporal(
        address,
        "workflow",
        "start",
        "--type",
        "EmojiSet",
        "--task-queue",
        "emoji-orchestration",
        "--workflow-id",
        set_id,
        "--input",
        json.dumps(request),
    )

    state = await query_until(address, set_id, "awaiting_start_frame_review")
    assert state["actions"][0]["stage"] == "awaiting_start_frame_review"
    assert await update(address, set_id, "approve_start_frames", {}) == ["wave"]

    state = await query_until(address, set_id, "awaiting_review")
    assert [f["status"] for f in state["actions"][0]["frames"]] == ["ready", "ready"]
    picked = await update(address, set_id, "pick_candidate", {"emoji": "wave", "frame": 1, "candidate": 1})
    assert picked["pick"] == 1 and picked["picked_by"] == "human"

    assert await update(address, set_id, "approve", {"reviewer": "cli"}) is None
    answer = await temporal(address, "workflow", "result", "--workflow-id", set_id)

    assert answer["status"] == "COMPLETED"
    result = answer["result"]
    assert result["status"] == "completed" and result["approved_by"] == "cli"
    assert result["emojis"][0]["webp"]["media_type"] == "image/webp"
