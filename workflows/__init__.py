"""The EmojiSet workflow and its contract. Deterministic, light: no I/O, no heavy imports."""
