"""Ending asyncio tasks for sure.

Python 3.11's ``asyncio.wait_for`` can lose a cancellation that arrives in the same loop iteration as the
awaitable it wraps completes (CPython gh-86296, fixed in 3.12): the task then goes on, and a loop such as a
replica fetcher's ``while True`` never ends, so a stop that cancels once and awaits the task waits forever (seen as
a broker that did not exit 30 s after SIGTERM). :func:`cancel_and_wait` cancels again until the task is done.
"""
from __future__ import annotations

import asyncio

#: seconds between two cancellations of a task that did not end
RECANCEL_INTERVAL_S = 0.2


async def cancel_and_wait(task: asyncio.Future | None, timeout_s: float | None = None) -> bool:
    """Cancel ``task`` and wait until it is done, cancelling again every :data:`RECANCEL_INTERVAL_S` while it
    runs (a lost cancellation, see the module docstring). Its result or exception is consumed. With ``timeout_s``
    it gives up after that long. Returns whether the task is done."""
    if task is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while not task.done():
        task.cancel()
        left = RECANCEL_INTERVAL_S if deadline is None else min(RECANCEL_INTERVAL_S, deadline - loop.time())
        if left <= 0:
            return False
        await asyncio.wait([task], timeout=left)
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at collection
    return True
