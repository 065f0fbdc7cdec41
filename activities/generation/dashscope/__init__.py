"""DashScope (Alibaba Cloud Model Studio) generator: the four roles on Wan models, through the asynchronous task API.

- ``character``: text-to-image, ``POST {base_url}/services/aigc/text2image/image-synthesis`` (e.g.
  ``wan2.2-t2i-flash``; ``n`` of 1 to 4 images per task, sides of 512 to 1440 pixels), the character prompt with the
  original product's framing (one full-body character, head to toe, 1:1, on solid white #FFFFFF, not transparent,
  not a sticker sheet) and a negative prompt;
- ``start_frame``: image edit, ``POST {base_url}/services/aigc/image2image/image-synthesis`` (e.g.
  ``wan2.5-i2i-preview``; ``input.images``: 1 to 3 images as URLs or base64 data URIs), the character image as
  reference and the pose prompt (the same character, style, full body, white background);
- ``edit_frame``: the same image edit, of one extracted frame with the reviewer's prompt;
- ``clip``: image-to-video, ``POST {base_url}/services/aigc/video-generation/video-synthesis`` (e.g.
  ``wan2.6-i2v-flash``; ``input.img_url`` a URL or a data URI, ``parameters.resolution``, ``duration``,
  ``prompt_extend``, ``seed``), the start frame with the motion prompt and the clip direction; the MP4 at
  ``output.video_url`` is returned as it is.

Every submit carries ``X-DashScope-Async: enable`` and is polled with ``GET {base_url}/tasks/{task_id}``; image
results are at ``output.results[].url``, the clip at ``output.video_url``, each valid 24 hours, on another host that
never gets the API key. The task id is heartbeated, so a retried activity resumes the same paid task
(:mod:`.api`); images travel as data URIs (:mod:`.media`); prompts and seeds are in :mod:`.prompts`. Failure mapping,
limits and models: docs/dashscope.md.

Sources:
https://www.alibabacloud.com/help/en/model-studio/text-to-image-v2-api-reference,
https://www.alibabacloud.com/help/en/model-studio/wan-image-edit-2-5,
https://www.alibabacloud.com/help/en/model-studio/image-to-video-api-reference,
https://www.alibabacloud.com/help/en/model-studio/image-to-video-guide,
https://help.aliyun.com/zh/model-studio/developer-reference/image-to-video-api-reference (durations and resolutions
per model), https://www.alibabacloud.com/help/en/model-studio/developer-reference/error-code.
"""

from __future__ import annotations

from activities.generation.dashscope.api import ResultExpired
from activities.generation.dashscope.generator import (
    CLIP_MODELS,
    DashScopeGenerator,
    DashScopeModels,
    clip_duration,
    create_dashscope_generator,
)

__all__ = [
    "CLIP_MODELS",
    "DashScopeGenerator",
    "DashScopeModels",
    "ResultExpired",
    "clip_duration",
    "create_dashscope_generator",
]
