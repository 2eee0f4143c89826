"""`python -m decision_adapter serve`: the container entrypoint (SageMaker passes `serve`)."""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import socket
import sys
from typing import cast

import uvicorn

from .http.app import create_app
from .http.connections import connection_limit, guarded_protocol
from .http.draining import DrainingServer
from .logs import configure_logging
from .settings import Settings, SettingsError


def unmap_large_buffers() -> None:
    """glibc raises its mmap threshold each time it frees a large block, so later request
    bodies land in the heap, which keeps the memory after their connections close. A fixed
    threshold keeps every buffer over 128 KiB in a mapping of its own, returned when freed."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:  # not glibc
        return
    m_mmap_threshold = -3
    mallopt(m_mmap_threshold, 128 * 1024)


def listening_socket(host: str, port: int) -> socket.socket:
    """Bind before loading anything, so a bad address or a taken port is one line at once."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="decision_adapter", description=__doc__)
    parser.add_argument(
        "command",
        nargs="?",
        default="serve",
        choices=["serve"],
        help="SageMaker starts containers with `serve`",
    )
    parser.parse_args(argv)
    try:
        settings = Settings.from_environment()
    except SettingsError as error:
        print(f"decision_adapter: invalid configuration: {error}", file=sys.stderr)
        return 2
    try:
        sock = listening_socket(settings.host, settings.port)
    except OSError as error:
        print(
            f"decision_adapter: invalid configuration: cannot listen on HOST={settings.host} "
            f"port {settings.port}: {error.strerror or error}",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings.log_level)
    unmap_large_buffers()

    failure: list[str] = []
    server: uvicorn.Server | None = None

    def stop(reason: str) -> None:
        failure.append(reason)
        if server is not None:
            server.should_exit = True

    app = create_app(settings, on_startup_failure=stop)
    protocol = guarded_protocol(
        max_connections=connection_limit(settings.max_connections),
        header_timeout_s=settings.header_timeout_s,
        body_timeout_s=settings.body_timeout_s,
        write_timeout_s=settings.write_timeout_s,
        retry_after_s=settings.retry_after_s,
        metrics_endpoint=settings.metrics_endpoint,
    )
    server = DrainingServer(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            # uvicorn annotates an int, but only waits this long (asyncio.wait_for): a
            # fraction of a second is kept, as it always was.
            timeout_graceful_shutdown=cast(int, settings.graceful_shutdown_s),
            lifespan="on",
            http=protocol,
        ),
        app,
    )
    # uvicorn drains on SIGTERM, then re-raises the signal through the handler it found in
    # place; a drained shutdown is a clean one, so that handler does nothing and we exit 0.
    signal.signal(signal.SIGTERM, lambda *_: None)
    server.run(sockets=[sock])
    if failure:
        print(f"decision_adapter: cannot serve: {failure[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    logging.captureWarnings(True)
    sys.exit(main())
