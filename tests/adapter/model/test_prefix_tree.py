"""The prefix tree of option continuations, without the model: the same tree as every prefix
spelled out (the reference below), in memory linear in the tokens."""

from __future__ import annotations

import tracemalloc

from decision_adapter.model.prefix_tree import (
    TreeLowerBound,
    common_prefix_length,
    prefix_tree_batches,
    tree_nodes,
    tree_tokens,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# Few distinct tokens, so generated paths share prefixes often.
paths = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), max_size=12)


def _prefixes(path):
    return {tuple(path[:end]) for end in range(1, len(path) + 1)}


def _reference_batches(continuations, max_tokens, max_paths):
    """Every prefix spelled out: what the tree must equal (quadratic in a path's length)."""
    ordered = sorted({tuple(c[:-1]) for c in continuations if len(c) > 1})
    batches, prefixes = [], set()
    for path in ordered:
        own = _prefixes(path)
        if batches and len(batches[-1]) < max_paths and len(prefixes | own) <= max_tokens:
            batches[-1].append(path)
            prefixes |= own
        else:
            batches.append([path])
            prefixes = own
    return batches


@settings(max_examples=300, deadline=None)
@given(continuations=paths, max_tokens=st.integers(1, 12), max_paths=st.integers(1, 5))
def test_batches_and_their_tokens_are_those_of_every_prefix_spelled_out(
    continuations, max_tokens, max_paths
):
    batches = prefix_tree_batches(continuations, max_tokens, max_paths)
    assert batches == _reference_batches(continuations, max_tokens, max_paths)
    for batch in batches:
        assert tree_tokens(batch) == len(set().union(*map(_prefixes, batch)))
        assert tree_tokens(batch[::-1]) == tree_tokens(batch)


@settings(max_examples=300, deadline=None)
@given(continuations=paths)
def test_nodes_are_the_sorted_distinct_prefixes_with_the_paths_through_them(continuations):
    ordered = sorted({tuple(c) for c in continuations})
    nodes, through = tree_nodes(ordered)
    spelled = [ordered[node.paths[0]][: node.depth] for node in nodes]
    assert spelled == sorted(set().union(set(), *map(_prefixes, ordered)))
    for node, prefix in zip(nodes, spelled, strict=False):
        assert node.token == prefix[-1]
        assert node.paths == [k for k, path in enumerate(ordered) if path[: len(prefix)] == prefix]
    for path, path_nodes in zip(ordered, through, strict=False):
        assert [spelled[node] for node in path_nodes] == [
            path[:end] for end in range(1, len(path) + 1)
        ]


@settings(max_examples=300, deadline=None)
@given(continuations=paths, max_tokens=st.integers(1, 12), max_paths=st.integers(1, 5))
def test_the_running_lower_bound_never_exceeds_what_the_batches_decode(
    continuations, max_tokens, max_paths
):
    bound = TreeLowerBound(max_tokens)
    decoded = sum(map(tree_tokens, prefix_tree_batches(continuations, max_tokens, max_paths)))
    for continuation in continuations:
        bound.add(tuple(continuation[:-1]))
        assert bound.tokens <= decoded
    # With batches as wide as needed it is exact: every distinct prefix once.
    wide = prefix_tree_batches(continuations, max_tokens=10**6, max_paths=10**6)
    exact = TreeLowerBound(10**6)
    for continuation in continuations:
        exact.add(tuple(continuation[:-1]))
    assert exact.tokens == sum(map(tree_tokens, wide))


def test_a_path_longer_than_a_batch_counts_whole_each_time_it_differs():
    bound = TreeLowerBound(max_tokens=4)
    bound.add((1, 2, 3, 4, 5))
    bound.add((1, 2, 3, 4, 6))  # its own batch too: the shared four tokens are decoded again
    bound.add((1, 2, 3, 4, 6))  # the same path: one batch
    assert bound.tokens == 10


def test_common_prefix_length():
    assert common_prefix_length((1, 2, 3), (1, 2, 4)) == 2
    assert common_prefix_length((1, 2), (1, 2, 3)) == 2
    assert common_prefix_length((), (1,)) == 0
    assert common_prefix_length((5,), (1,)) == 0


def test_a_long_option_is_planned_in_memory_linear_in_its_tokens():
    """One option of 6,000 tokens: its prefixes spelled out hold 18 million tokens (144 MiB of
    pointers alone); the tree holds a few numbers per token."""
    long_path = list(range(6000))
    tracemalloc.start()
    try:
        batches = prefix_tree_batches([long_path + [1], [7, 8]], max_tokens=512, max_paths=62)
        tokens = sum(map(tree_tokens, batches))
        nodes, through = tree_nodes(batches[0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert batches == [[tuple(long_path)], [(7,)]]
    assert tokens == 6001 and len(nodes) == 6000 and through == [list(range(6000))]
    assert peak < 8 << 20, f"{peak >> 20} MiB"
