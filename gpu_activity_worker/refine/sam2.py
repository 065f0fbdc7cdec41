"""The SAM2 click segmenter ``sam2``: SAM 2.1 prompted by the clicks, tracked through the following frames.

The model is the worker's own ``sam2`` step (:mod:`gpu_activity_worker.engines.sam2`), built once and shared with
the pipelines using it: no second copy of the weights. All clicks go to SAM2 as one object, foreground clicks as
positive points and background clicks as negative ones; a single click asks for SAM2's three ambiguity masks and
takes the best-scoring (SAM2 is trained to answer a single click so), several clicks for its single mask. The region
on the following frames is SAM2's video propagation of the first frame's region
(:func:`~gpu_activity_worker.engines.sam2.propagate_masks`), so a correction follows the subject as it moves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from sam2.sam2_image_predictor import SAM2ImagePredictor

from gpu_activity_worker.device import autocast
from gpu_activity_worker.engines.sam2 import Sam2Step, propagate_masks
from gpu_activity_worker.pipeline import Pipelines
from gpu_activity_worker.refine import InvalidRefineError
from workflows.contract import RefineMode, RefinePoint


class Sam2Segmenter:
    """The ``sam2`` segmenter around the worker's SAM2 step. Thread-safe: each call makes its own predictor."""

    uses_gpu = True

    def __init__(self, step: Sam2Step, name: str) -> None:
        self.step = step
        self.name = name
        self.device = step.device
        self.precision = step.precision

    def segment(self, image: np.ndarray, points: Sequence[RefinePoint], mode: RefineMode) -> np.ndarray:
        """SAM2's mask of the object the clicks point at on one frame (bool HxW)."""
        coords = np.array([(p.x + 0.5, p.y + 0.5) for p in points], dtype=np.float32)
        labels = np.array([1 if p.foreground else 0 for p in points], dtype=np.int32)
        predictor = SAM2ImagePredictor(self.step.model)
        with torch.inference_mode(), autocast(self.device, self.precision):
            predictor.set_image(np.array(image))  # a writable copy: torch warns on read-only arrays
            masks, scores, _ = predictor.predict(
                point_coords=coords, point_labels=labels, multimask_output=len(points) == 1
            )
        return np.asarray(masks[int(np.argmax(scores))] > 0.5)

    def carry(
        self,
        first_image: np.ndarray,
        first: np.ndarray,
        images: Sequence[np.ndarray],
        points: Sequence[RefinePoint],
        mode: RefineMode,
    ) -> list[np.ndarray]:
        """The region ``first`` on ``first_image`` tracked through the following ``images`` by SAM2's video memory
        (nothing where ``first`` is empty)."""
        if not first.any():
            return [np.zeros(image.shape[:2], dtype=bool) for image in images]
        return propagate_masks(self.step, [first_image, *images], first)[1:]


def create_segmenter(variant: str | None, pipelines: Pipelines) -> Sam2Segmenter:
    """The factory: the worker's ``sam2[:variant]`` step, built (weights loaded) on first use.

    Raises:
        WeightsMissingError: The variant's checkpoint is not in the model folder.
        PipelineError: No such variant.
    """
    name = "sam2" if variant is None else f"sam2:{variant}"
    step = pipelines.step(name)
    bare = step if isinstance(step, Sam2Step) else getattr(step, "step", None)  # behind a micro-batcher
    if not isinstance(bare, Sam2Step):
        raise InvalidRefineError(f"the worker's {name} step is not SAM2's ({type(step).__name__})")
    return Sam2Segmenter(bare, name)
