"""The review app's routes, one :class:`fastapi.APIRouter` per area, included by :func:`~starter.review.app.create_app`.

- :mod:`.sets`: the set list, a set's page, its live fragment and progress JSON.
- :mod:`.start`: the start form.
- :mod:`.actions`: the reviewer's messages to a set (pick, approve, regenerate, cancel).
- :mod:`.refine`: one frame's cut-out refined by points, and undone.
- :mod:`.files`: images and downloads, resolved through the set's state.

Handlers get what they share through the dependencies of :mod:`starter.review.dependencies`; the owner check of
every ``/sets/<id>`` address is the app's ``owners_only`` middleware, run before any of them.
"""
