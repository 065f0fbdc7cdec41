"""Exporting finished emoji: animated WebP, APNG and GIF stickers, sprite sheets and the set's contact sheet."""
