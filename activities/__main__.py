"""``python -m activities``: run the orchestration worker."""

import asyncio

from activities.worker import main

asyncio.run(main())
