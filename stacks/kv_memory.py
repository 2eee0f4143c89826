"""The KV cache a decision adapter allocates for its requests at once, checked against the
memory of the instance types it may run on.

The adapter's main context holds `nCtx` cells. Decisions scored at once (above 1) open a second
context of two KV streams of `nCtx` cells per request; chat streams (above 1) one of a stream
of `nCtx` cells each (docs/scoring.md, "Requests at once"). Each cell holds `kvBytesPerToken`.
The cache may take at most KV_SHARE of the memory: the rest holds the weights, the state cache
and the process.
"""

from __future__ import annotations

from collections.abc import Sequence

from stacks.instance_memory import UnknownMemory, memory_gib

KV_SHARE = 0.5
GIB = 1 << 30


def kv_cells(n_ctx: int, *, scoring_requests: int, chat_streams: int) -> int:
    """The cells of every context the adapter opens."""
    streams = 1
    if scoring_requests > 1:
        streams += 2 * scoring_requests
    if chat_streams > 1:
        streams += chat_streams
    return streams * n_ctx


def check_fits(
    instance_types: Sequence[str],
    *,
    on_gpu: bool,
    n_ctx: int,
    scoring_requests: int,
    chat_streams: int,
    bytes_per_token: int,
) -> None:
    """ValueError naming the keys when the KV cache outgrows its share of an instance type."""
    needed = kv_cells(n_ctx, scoring_requests=scoring_requests, chat_streams=chat_streams)
    needed_bytes = needed * bytes_per_token
    for instance_type in instance_types:
        try:
            memory = memory_gib(instance_type, on_gpu=on_gpu)
        except UnknownMemory as unknown:
            if needed == n_ctx:  # the adapter's one context, as every release had it
                continue
            raise ValueError(
                f"{unknown}: concurrency.maxScoringRequests and concurrency.maxChatStreams above "
                "1 need a type whose memory is known (stacks/instance_memory.py)"
            ) from None
        if needed_bytes > KV_SHARE * memory * GIB:
            where = "one GPU's memory" if on_gpu else "memory"
            raise ValueError(
                f"concurrency.maxScoringRequests {scoring_requests} and "
                f"concurrency.maxChatStreams {chat_streams} at nCtx {n_ctx} need {needed} KV "
                f"cells of {bytes_per_token} bytes (concurrency.kvBytesPerToken): "
                f"{needed_bytes / GIB:.1f} GiB, more than {KV_SHARE:.0%} of {instance_type}'s "
                f"{memory} GiB of {where}; lower them or nCtx, or choose a larger instance type"
            )
