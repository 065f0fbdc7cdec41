"""What one drawing shows, all but its phase: the :class:`Scene` of a character candidate, start frame, take or edit.

Every role draws the character again from its prompt, so the scenes of one set agree: a character candidate's
:class:`CandidateLook` comes back in its start frames, a start frame's :class:`Variation` in the takes made from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from activities.generation.procedural.keywords import REST, Staging, staging_for
from activities.generation.procedural.motion import CandidateLook, Pose, Variation
from activities.generation.procedural.prompt import CharacterSpec, StyleTweaks
from workflows.contract import ActionSpec


@dataclass(frozen=True)
class Scene:
    """Everything that fixes a drawn frame except its phase ``t``."""

    spec: CharacterSpec
    look: CandidateLook
    style: StyleTweaks
    staging: Staging
    variation: Variation

    def pose(self, t: float) -> Pose:
        """The character's pose at phase ``t`` of the loop."""
        return self.variation.pose(self.staging.motion, t)


def character_scene(prompt: str, style: str, seed: int, candidate: int) -> Scene:
    """Character candidate ``candidate`` of ``prompt``, standing at rest."""
    spec = CharacterSpec.from_prompt(prompt, seed)
    look = CandidateLook.for_candidate(spec, seed, candidate)
    return Scene(spec, look, StyleTweaks.from_style(style), REST, Variation(amplitude=0.0))


def action_scene(
    character_prompt: str,
    character_candidate: int,
    action: ActionSpec,
    *,
    custom: str,
    style: str,
    seed: int,
    variation: Variation,
) -> Scene:
    """The character of ``character_prompt`` (its candidate ``character_candidate``) performing ``action``.

    Args:
        character_prompt: The prompt the character was drawn from.
        character_candidate: The picked character candidate, whose look is kept.
        action: The action: its staging (motion, expression, prop), named or read from its prompts.
        custom: A reviewer's words that change the character (a colour, a kind, an accessory); may be empty.
        style: The set's style words.
        seed: The set's seed.
        variation: How this drawing's motion differs from its siblings'.
    """
    spec = CharacterSpec.from_prompt(character_prompt, seed).refined(custom)
    look = CandidateLook.for_candidate(spec, seed, character_candidate)
    return Scene(spec, look, StyleTweaks.from_style(style), staging_for(action), variation)
