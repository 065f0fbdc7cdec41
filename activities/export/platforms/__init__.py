"""Platform exports: one module per target, each with its rule table and its upload package layout.

:func:`builtin_targets` is the registry: adding a platform is one module exposing ``TARGET`` plus one entry here.
The fitting ladder (:mod:`.fitting`, :mod:`.webm`), the quality score (:mod:`.quality`) and the validator
(:mod:`.validate`) are shared by every target.
"""

from __future__ import annotations

import importlib

from activities.export.platforms.base import Target

BUILTIN_TARGETS = {
    "line-emoji": "activities.export.platforms.line_emoji",
    "line-sticker": "activities.export.platforms.line_sticker",
    "telegram": "activities.export.platforms.telegram",
    "discord": "activities.export.platforms.discord",
    "slack": "activities.export.platforms.slack",
}
"""Target name -> module; a module is imported when its target is first used."""


def builtin_target(name: str) -> Target:
    """The built-in target called ``name``.

    Raises:
        KeyError: No such target; the message lists the known ones.
    """
    try:
        module = BUILTIN_TARGETS[name]
    except KeyError:
        raise KeyError(f"unknown export target {name!r}; known targets: {sorted(BUILTIN_TARGETS)}") from None
    target: Target = importlib.import_module(module).TARGET
    return target
