"""The endpoint's GPUs: pools minus excluded types, checked against RunPod's GPU catalogue before a deploy writes.

RunPod places serverless workers by pool (``gpu.pools``; ``AMPERE_24`` is the L4, RTX A5000 and RTX 3090) and takes
GPU types out of them (``gpu.excludedTypes``, the catalogue's type ``id``). There is no list of wanted types: one
card is pinned as its pool minus the others, e.g. the RTX A5000 as ``AMPERE_24`` without ``NVIDIA L4`` and ``NVIDIA
GeForce RTX 3090``. An update that sends ``pools`` without ``excludedTypes`` clears the exclusions, so deploy sends
both, carrying the endpoint's own when the settings name none (:func:`carried_exclusions`).

The catalogue (``GET /v2/catalog/gpus?include=AVAILABILITY&product=SERVERLESS&minCudaVersion=13.0``) lists each GPU
type with its ``pool`` and the CUDA versions its serverless machines offer (``cudaVersions``: ``version``,
``available`` = free capacity now). :func:`check` refuses, before anything is written, a choice RunPod would refuse
(an unknown pool, an exclusion outside the pools: 400) or could never run (no type left, or none offered with the
CUDA the image needs), and reports where workers can start now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

POOLS_SETTING = "POPCON_RUNPOD_GPU_POOLS"
EXCLUDED_SETTING = "POPCON_RUNPOD_GPU_EXCLUDED_TYPES"


class GpuChoiceError(Exception):
    """The chosen pools and exclusions cannot run the image; the message says what to change."""


@dataclass(frozen=True)
class GpuChoice:
    """A checked choice: what the endpoint's ``gpu`` block carries, and a line per GPU type workers may start on."""

    pools: tuple[str, ...]
    excluded: tuple[str, ...]
    report: tuple[str, ...]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _types_by_pool(catalogue: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    pools: dict[str, list[str]] = {}
    for gpu in catalogue:
        if gpu.get("pool"):
            pools.setdefault(str(gpu["pool"]), []).append(str(gpu["id"]))
    return pools


def _describe(pools: Sequence[str], by_pool: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{pool}: {', '.join(by_pool.get(pool, []))}" for pool in pools)


def carried_exclusions(
    catalogue: Sequence[Mapping[str, Any]], pools: Sequence[str], current: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The endpoint's ``current`` exclusions split into those still inside ``pools`` (kept) and the others (dropped:
    RunPod refuses an exclusion outside the pools)."""
    inside = {gpu_type for pool in pools for gpu_type in _types_by_pool(catalogue).get(pool, [])}
    return tuple(t for t in current if t in inside), tuple(t for t in current if t not in inside)


def check(
    catalogue: Sequence[Mapping[str, Any]], pools: Sequence[str], excluded: Sequence[str], min_cuda: str
) -> GpuChoice:
    """Check ``pools`` minus ``excluded`` against the serverless catalogue: GPUs on CUDA ``min_cuda`` or newer.

    Raises:
        GpuChoiceError: A pool the catalogue does not have, an exclusion that is not a type of the pools, no type
            left, or none of those left offered with CUDA ``min_cuda`` or newer.
    """
    by_pool = _types_by_pool(catalogue)
    unknown = [pool for pool in pools if pool not in by_pool]
    if unknown:
        raise GpuChoiceError(
            f"{POOLS_SETTING}: RunPod has no serverless GPU pool {', '.join(map(repr, unknown))}; its pools: "
            f"{_describe(sorted(by_pool), by_pool)}"
        )
    inside = {gpu_type for pool in pools for gpu_type in by_pool[pool]}
    outside = [gpu_type for gpu_type in excluded if gpu_type not in inside]
    if outside:
        raise GpuChoiceError(
            f"{EXCLUDED_SETTING}: {', '.join(map(repr, outside))} is not a GPU type of the pools "
            f"({_describe(pools, by_pool)}): RunPod refuses such an exclusion; use the catalogue's type ids"
        )
    left = [gpu for gpu in catalogue if gpu.get("pool") in pools and gpu["id"] not in excluded]
    if not left:
        raise GpuChoiceError(
            f"{EXCLUDED_SETTING} takes every GPU type out of the pools ({_describe(pools, by_pool)}): leave one in"
        )
    floor = _version(min_cuda)
    report: list[str] = []
    for gpu in left:
        versions = [v for v in gpu.get("cudaVersions") or [] if _version(str(v["version"])) >= floor]
        if not versions:
            continue
        free = [str(v["version"]) for v in versions if v.get("available")]
        offered = ", ".join(str(v["version"]) for v in versions)
        now = f"free now on {', '.join(free)}" if free else "all busy now: workers wait until one frees up"
        report.append(f"{gpu['id']} ({gpu['pool']}): CUDA {offered}; {now}")
    if not report:
        names = ", ".join(str(gpu["id"]) for gpu in left)
        raise GpuChoiceError(
            f"none of the chosen GPUs ({names}) runs serverless workers on CUDA {min_cuda} or newer, which the image "
            f"needs: choose other pools ({POOLS_SETTING}) or fewer exclusions ({EXCLUDED_SETTING})"
        )
    return GpuChoice(tuple(pools), tuple(excluded), tuple(report))
