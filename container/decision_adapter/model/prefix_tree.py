"""Token paths as a prefix tree, in time and memory linear in their tokens.

A path of L tokens has L prefixes holding L^2 / 2 tokens between them: keyed by prefix, one
long option held GiBs before its request could be refused. Here a prefix is never built:
sorted paths share with their neighbour exactly the prefixes they share with any earlier path,
so the distinct prefixes are each path's tokens past that common part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    for length, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return length
    return min(len(a), len(b))


_Trie: TypeAlias = dict[int, "_Trie"]  # a token's extensions, each with its own


def tree_tokens(paths: Sequence[Sequence[int]]) -> int:
    """Tokens the tree of `paths` decodes: each distinct prefix once."""
    ordered = sorted(map(tuple, paths))
    return sum(
        len(path) - common_prefix_length(previous, path)
        for previous, path in zip([()] + ordered, ordered, strict=False)
    )


def prefix_tree_batches(
    continuations: Sequence[Sequence[int]], max_tokens: int, max_paths: int
) -> list[list[tuple[int, ...]]]:
    """What multi-token continuations decode after the question: each one's tokens but its
    last (a path), distinct and sorted, in batches of at most `max_paths` paths whose distinct
    prefixes number at most `max_tokens` (a longer path is a batch of its own)."""
    paths = sorted({tuple(c[:-1]) for c in continuations if len(c) > 1})
    batches: list[list[tuple[int, ...]]] = []
    size = 0  # the last batch's distinct prefixes
    for path in paths:
        if batches and len(batches[-1]) < max_paths:
            grown = size + len(path) - common_prefix_length(batches[-1][-1], path)
            if grown <= max_tokens:
                batches[-1].append(path)
                size = grown
                continue
        batches.append([path])
        size = len(path)
    return batches


class TreeLowerBound:
    """At least what prefix_tree_batches' batches of the paths added so far decode, counted as
    they come, in any order: a path longer than a batch is a batch of its own and decodes all
    of it; shorter ones decode each of their distinct prefixes at least once. Holds no more
    than the tokens it counts."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self._long: set[tuple[int, ...]] = set()
        self._trie: _Trie = {}  # the shorter paths' distinct prefixes

    def add(self, path: tuple[int, ...]) -> None:
        if len(path) > self.max_tokens:
            if path not in self._long:
                self._long.add(path)
                self.tokens += len(path)
            return
        node = self._trie
        for token in path:
            if token not in node:
                node[token] = {}
                self.tokens += 1
            node = node[token]


@dataclass(frozen=True)
class Node:
    """One distinct prefix: its last token, its length and the paths (indexes) through it."""

    token: int
    depth: int
    paths: list[int]


def tree_nodes(paths: Sequence[Sequence[int]]) -> tuple[list[Node], list[list[int]]]:
    """The distinct prefixes of sorted `paths` in sorted order (a prefix before its
    extensions), and for each path the index of the node of each of its prefixes, shortest
    first."""
    nodes: list[Node] = []
    through: list[list[int]] = []
    previous: Sequence[int] = ()
    previous_nodes: list[int] = []
    for index, path in enumerate(paths):
        shared = common_prefix_length(previous, path)
        own = previous_nodes[:shared]
        for node in own:
            nodes[node].paths.append(index)
        for end in range(shared, len(path)):
            own.append(len(nodes))
            nodes.append(Node(path[end], end + 1, [index]))
        through.append(own)
        previous, previous_nodes = path, own
    return nodes, through
