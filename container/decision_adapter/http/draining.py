"""SIGTERM: stop accepting, let in-flight work finish, and stop what is left at the deadline.

uvicorn drains for `timeout_graceful_shutdown` seconds and then cancels the request tasks. A
cancelled task cannot stop work already on the model thread (a streamed chat generated on
for seconds past the deadline) and a cancelled request gets a plain-text 500. So the model work
itself is stopped a little before uvicorn's deadline: each request then ends in its own format
(a 503, or an error event that closes a stream) and the model thread is free at exit.
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from starlette.applications import Starlette

from ..logs import log
from .connections import answer_backlog


def stop_work_after(grace_s: float) -> float:
    """When to stop model work: leave the requests up to a second to answer before uvicorn's
    own deadline."""
    return max(0.0, grace_s - min(1.0, grace_s / 4))


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self.app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Before uvicorn closes the listeners: what waits in their backlog gets a 503, not a
        # reset.
        listening = [listener for server in self.servers for listener in server.sockets]
        settings = getattr(self.app.state, "settings", None)
        retry_after_s = settings.retry_after_s if settings is not None else 1
        answered = answer_backlog([*listening, *(sockets or [])], retry_after_s)
        if answered:
            log.info("shutdown", extra={"fields": {"backlog_answered_503": answered}})
        service = getattr(self.app.state, "service", None)
        deadline = None
        if service is not None:
            grace = self.config.timeout_graceful_shutdown or 0.0
            deadline = asyncio.get_running_loop().call_later(
                stop_work_after(grace), service.stop_work
            )
        try:
            await super().shutdown(sockets)
        finally:
            if deadline is not None:
                deadline.cancel()
