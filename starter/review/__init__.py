"""The review web app served by ``popcon review``: start sets, follow them, pick, regenerate, refine, download.

Server-rendered pages (Jinja2) over :class:`starter.client.EmojiSetClient`, a little plain JS for live progress, the
animated previews and the refine canvas; no front-end build step. :func:`starter.review.app.create_app` builds the
app, :func:`starter.review.server.serve` runs it with uvicorn.
"""
