"""``python -m activities``: run the orchestration worker process (its task queue and the paid generator calls')."""

import asyncio

from activities.worker import main

asyncio.run(main())
