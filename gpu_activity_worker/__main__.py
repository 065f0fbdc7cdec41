"""``python -m gpu_activity_worker``: run the GPU worker (in-process matting engines)."""

import asyncio

from gpu_activity_worker.worker import main

asyncio.run(main())
