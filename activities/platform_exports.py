"""Platform export activities: check the targets before any work, and make one target's upload package.

The package's files are stored under ``sets/<set>/packages/<target>/`` (deterministic keys: a retried activity
overwrites its own files) with the ZIP beside them when the platform takes one.
"""

from __future__ import annotations

import asyncio

from PIL import Image
from temporalio import activity

from activities.export.animation import decode_rgba_png
from activities.export.platforms import builtin_target
from activities.export.platforms.base import DoesNotFitError, EmojiFrames, Package
from activities.export.platforms.packaging import require_set_size
from core.artifacts import ArtifactError, ArtifactStore, get_in_set
from workflows.contract import (
    ActivityName,
    ArtifactRef,
    CheckExportsInput,
    ExportPackageInput,
    ExportTarget,
    FailureType,
    PackageFileOutput,
    PackageOutput,
)
from workflows.keys import package_key

MEDIA_TYPES = {".png": "image/png", ".gif": "image/gif", ".webm": "video/webm", ".zip": "application/zip"}


class PlatformExportActivities:
    """Reads approved frames from the store and writes each platform's package back to it."""

    def __init__(self, store: ArtifactStore) -> None:
        self._store = store

    @activity.defn(name=ActivityName.CHECK_EXPORTS)
    async def check_exports(self, request: CheckExportsInput) -> list[str]:
        """Why platform targets will not take a set of this many emoji (LINE emoji: 8 to 40), known before any work.

        The set still runs: its other targets are made, and these carry the reason in their package.
        """
        refusals = []
        for target in request.targets:
            if target is ExportTarget.GENERIC:
                continue
            try:
                require_set_size(builtin_target(target.value).rules, request.emojis)
            except DoesNotFitError as err:
                refusals.append(f"{target.value}: {err}")
        return refusals

    @activity.defn(name=ActivityName.EXPORT_PACKAGE)
    async def export_package(self, request: ExportPackageInput) -> PackageOutput:
        """Fit every emoji to the target's limits, validate the files read back, and store the package."""
        return await asyncio.to_thread(self._export, request)

    def _export(self, request: ExportPackageInput) -> PackageOutput:
        target = builtin_target(request.target.value)
        within = package_key(request.set_id, request.target.value, f"{request.target.value}.zip")
        emojis = [
            EmojiFrames(emoji.pose, [self._frame(ref, within) for ref in emoji.frames], emoji.frame_duration_ms)
            for emoji in request.emojis
        ]
        try:
            package = target.package(emojis)
        except DoesNotFitError as err:
            raise FailureType.EXPORT_DOES_NOT_FIT.error(f"{target.rules.platform}: {err}") from err
        return self._store_package(request.set_id, request.target, package)

    def _frame(self, ref: ArtifactRef, within: str) -> Image.Image:
        """A picked frame of the set the package is written to (``within``: a key of it), never another set's."""
        try:
            return decode_rgba_png(get_in_set(self._store, ref, within))
        except ArtifactError as err:
            raise err.failure_type.error(str(err)) from err
        except ValueError as err:
            raise FailureType.CORRUPT_IMAGE.error(f"{ref.uri}: {err}") from err

    def _store_package(self, set_id: str, target: ExportTarget, package: Package) -> PackageOutput:
        files = []
        for file in package.files:
            stored = self._store.put(package_key(set_id, target.value, file.name), file.data, _media_type(file.name))
            fitted = file.fitted
            files.append(
                PackageFileOutput(
                    name=file.name,
                    file=stored,
                    emoji=file.emoji,
                    rung=fitted.rung if fitted else None,
                    frames=fitted.frames if fitted else None,
                    loop_s=fitted.loop_s if fitted else None,
                    plays=fitted.plays if fitted else None,
                    ssim_white=fitted.ssim_white if fitted else None,
                    ssim_dark=fitted.ssim_dark if fitted else None,
                )
            )
        archive = None
        if package.archive is not None:
            archive = self._store.put(
                package_key(set_id, target.value, f"{target.value}.zip"), package.archive, "application/zip"
            )
        return PackageOutput(target=target, files=files, archive=archive)


def _media_type(name: str) -> str:
    return next((media for suffix, media in MEDIA_TYPES.items() if name.endswith(suffix)), "application/octet-stream")
