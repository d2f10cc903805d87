"""Binary SHA-256 Merkle tree with domain-separated leaves and nodes (batch receipt signatures).

leaf  = SHA-256(0x00 || data)
node  = SHA-256(0x01 || left || right)

Levels are built pairwise from the left; when a level has an odd number of nodes the last one
is *promoted* unchanged to the next level (never duplicated, so no two different leaf lists
share a root by duplication, CVE-2012-2459 style). The audit path of a leaf lists the sibling
hashes from the leaf upwards, skipping levels where the node was promoted; the verifier derives
the sibling side and the skipped levels from ``index`` and ``size`` alone.
"""
from __future__ import annotations

import hashlib
from typing import Sequence, TypeVar

from .errors import GuardArgumentValueError

T = TypeVar("T")

__all__ = ["leaf_hash", "node_hash", "build_levels", "audit_path", "audit_paths", "root_from_path"]

LEAF_TAG = b"\x00"
NODE_TAG = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """Return SHA-256(0x00 || data)."""
    return hashlib.sha256(LEAF_TAG + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE_TAG + left + right).digest()


def build_levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """Return all levels, leaf hashes first and ``[root]`` last.

    Raises:
        ValueError: ``leaves`` is empty.
    """
    if not leaves:
        raise GuardArgumentValueError("build_levels() leaves is empty: a Merkle tree needs at least one leaf")
    levels = [list(leaves)]
    while len(levels[-1]) > 1:
        cur = levels[-1]
        nxt = [node_hash(cur[i], cur[i + 1]) for i in range(0, len(cur) - 1, 2)]
        if len(cur) % 2:
            nxt.append(cur[-1])
        levels.append(nxt)
    return levels


def audit_path(levels: Sequence[Sequence[T]], index: int) -> list[T]:
    """Return the sibling hashes proving leaf ``index`` against the root of ``levels``.

    ``levels`` may hold the hashes in any form (bytes, or e.g. their hex strings, converted
    once per node), as long as every level keeps its length.
    """
    size = len(levels[0])
    if not 0 <= index < size:
        raise GuardArgumentValueError(f"leaf index {index} out of range for {size} leaves")
    path = []
    for level in levels[:-1]:
        sibling = index ^ 1
        if sibling < len(level):
            path.append(level[sibling])
        index //= 2
    return path


def audit_paths(levels: Sequence[Sequence[T]]) -> list[list[T]]:
    """Return ``[audit_path(levels, i) for i in range(len(levels[0]))]``, computed in one pass.

    A leaf's path is its own sibling followed by its parent's path, so each level's paths are
    built from the level above's: one list concatenation per node instead of a walk up the tree
    per leaf. Every returned list is a new object (no two leaves share one).
    """
    above: list[list[T]] = [[]]  # the root's path
    for level in reversed(levels[:-1]):
        n = len(level)
        above = [[level[j ^ 1]] + above[j >> 1] if (j ^ 1) < n else list(above[j >> 1]) for j in range(n)]
    return above


def root_from_path(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes:
    """Recompute the root from a leaf hash and its audit path.

    Raises:
        ValueError: ``index``/``size`` are inconsistent or ``path`` has the wrong length.
    """
    if size < 1 or not 0 <= index < size:
        raise GuardArgumentValueError(f"leaf index {index} out of range for {size} leaves")
    node, width, used = leaf, size, 0
    while width > 1:
        if index % 2:
            if used >= len(path):
                raise GuardArgumentValueError("audit path too short")
            node = node_hash(path[used], node)
            used += 1
        elif index + 1 < width:
            if used >= len(path):
                raise GuardArgumentValueError("audit path too short")
            node = node_hash(node, path[used])
            used += 1
        index //= 2
        width = (width + 1) // 2
    if used != len(path):
        raise GuardArgumentValueError(f"audit path has {len(path)} hashes, expected {used}")
    return node
