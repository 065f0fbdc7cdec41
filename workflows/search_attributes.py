"""Custom search attributes that make sets findable in the Web UI, e.g. ``EmojiSetPhase = "awaiting_review"``."""

from temporalio.common import SearchAttributeKey

PHASE = SearchAttributeKey.for_keyword("EmojiSetPhase")
FRAMES_DONE = SearchAttributeKey.for_int("EmojiSetFramesDone")
FRAMES_TOTAL = SearchAttributeKey.for_int("EmojiSetFramesTotal")
OWNER = SearchAttributeKey.for_keyword("EmojiSetOwner")

ALL = (PHASE, FRAMES_DONE, FRAMES_TOTAL, OWNER)
"""Every key the workflow upserts; the server must know them all (registered at start-up)."""
