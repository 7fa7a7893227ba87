"""A coroutine that runs for exactly the duration of a block.

The metrics sampler and the loop-lag probe both watch a measurement window
from the side; this is the one place that starts such a watcher and cancels
it cleanly when the window closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``work`` while the block runs; cancel and await it on the way out."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
