"""Custom search attributes that make sets findable in the Web UI, e.g. ``EmojiSetPhase = "awaiting_review"``."""

from temporalio.common import SearchAttributeKey

PHASE = SearchAttributeKey.for_keyword("EmojiSetPhase")
FRAMES_DONE = SearchAttributeKey.for_int("EmojiSetFramesDone")
FRAMES_TOTAL = SearchAttributeKey.for_int("EmojiSetFramesTotal")
OWNER = SearchAttributeKey.for_keyword("EmojiSetOwner")
AWAITING = SearchAttributeKey.for_keyword_list("EmojiSetAwaiting")
"""What the set waits for people to do: ``character_review``, ``start_frame_review``, ``custom_prompt``,
``final_review`` (e.g. ``EmojiSetAwaiting = 'start_frame_review'``)."""

ALL = (PHASE, FRAMES_DONE, FRAMES_TOTAL, OWNER, AWAITING)
"""Every key the workflow upserts; the server must know them all (registered at start-up)."""
