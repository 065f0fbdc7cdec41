"""Platform exports, the same from a set's own approval and from a later export of a finished set.

Each platform target is one ``export_package`` activity, all in parallel. A target the set cannot be fitted to does
not fail the others, nor the set: its package carries the reason (the rule and the closest figure reached).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows import calls
    from workflows.contract import EmojiFramesRef, ExportPackageInput, ExportTarget, PackageOutput


async def export_packages(
    set_id: str, targets: Sequence[ExportTarget], emojis: list[EmojiFramesRef]
) -> list[PackageOutput]:
    """One package per platform target (the generic target is the set's own assembly, not a package)."""
    platforms = [target for target in targets if target is not ExportTarget.GENERIC]
    return list(await asyncio.gather(*(_export(set_id, target, emojis) for target in platforms)))


async def _export(set_id: str, target: ExportTarget, emojis: list[EmojiFramesRef]) -> PackageOutput:
    package = await calls.outcome(
        calls.export_package(
            ExportPackageInput(set_id=set_id, target=target, emojis=emojis), summary=f"export {target.value} package"
        )
    )
    if isinstance(package, calls.Failed):
        return PackageOutput(target=target, error=package.reason)
    return package
