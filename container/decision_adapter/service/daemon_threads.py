"""Work on a daemon thread, awaited from the event loop: the model's load and a request's
preparation (tokenizing, planning), which neither the shutdown nor the interpreter's exit waits
for."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def on_daemon_thread(function: Callable[[], T], name: str) -> asyncio.Future[T]:
    """`function()` on a thread that neither the shutdown nor the interpreter's exit waits for
    (asyncio.to_thread's would be joined at exit): checksumming a large model at start-up, or
    one long tokenizer call in llama.cpp, must not keep a SIGTERM'd process alive. Cancelling
    the future abandons the work."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if future.done():  # abandoned
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome: tuple[object, BaseException | None] = (function(), None)
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            outcome = (None, error)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
