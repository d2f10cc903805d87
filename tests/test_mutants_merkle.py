"""Merkle range checks that the mutation pass (scripts/mutate.py) found unpinned: the receipt tests
reach them only through a root that would fail anyway, so the checks themselves were never held."""
from __future__ import annotations

import pytest

from qdrant_guard import merkle


def _tree(n):
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(n)]
    return leaves, merkle.build_levels(leaves)


def test_empty_tree_is_refused():
    with pytest.raises(ValueError, match="at least one leaf"):
        merkle.build_levels([])


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_audit_path_refuses_an_index_outside_the_leaves(n):
    _, levels = _tree(n)
    for index in (-1, n, n + 1):
        with pytest.raises(ValueError, match="out of range"):
            merkle.audit_path(levels, index)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_root_from_path_refuses_an_index_outside_the_leaves(n):
    leaves, levels = _tree(n)
    root = levels[-1][0]
    for i, leaf in enumerate(leaves):
        assert merkle.root_from_path(leaf, i, n, merkle.audit_path(levels, i)) == root
    path = merkle.audit_path(levels, n - 1)
    for index in (-1, n, n + 1):
        with pytest.raises(ValueError, match="out of range"):
            merkle.root_from_path(leaves[-1], index, n, path)
    with pytest.raises(ValueError, match="out of range"):
        merkle.root_from_path(leaves[0], 0, 0, [])


@pytest.mark.parametrize("n", [2, 5, 8])
def test_a_short_path_is_a_value_error_for_every_leaf(n):
    # Left or right child alike: "too short", never an IndexError that escapes the receipt check.
    leaves, levels = _tree(n)
    for i, leaf in enumerate(leaves):
        path = merkle.audit_path(levels, i)
        for cut in range(len(path)):
            with pytest.raises(ValueError, match="too short"):
                merkle.root_from_path(leaf, i, n, path[:cut])
