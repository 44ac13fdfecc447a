"""The Python node partition matches the Go sampler's (outputs from loader/sampler)."""

import pytest

from cacheagent.sampler import node_of, node_partition

ROWS = [120, 80, 95, 101, 77, 130, 64, 99, 110, 88, 91, 105, 0, 100, 100, 100, 100, 3]
SEED = 123456789012345


@pytest.mark.parametrize("rows, nodes, seed, want", [
    ([4, 4, 4, 4, 9, 2, 6], 3, 7, [[4, 5], [2, 6], [0, 1, 3]]),  # pinned in loader/sampler/pinned_test.go
    (ROWS, 2, SEED, [[5, 6, 7, 9, 10, 11, 13, 15, 17], [0, 1, 2, 3, 4, 8, 14, 16]]),
    (ROWS, 4, SEED, [[5, 6, 10, 16, 17], [0, 2, 4, 14], [1, 7, 8, 15], [3, 9, 11, 13]]),
    (ROWS, 5, SEED, [[4, 5, 7], [0, 1, 15], [8, 9, 13], [6, 10, 11, 14], [2, 3, 16, 17]]),
    ([50] * 20, 4, (1 << 63) + 5, [[2, 9, 11, 14, 18], [3, 4, 10, 13, 17], [1, 6, 7, 8, 12], [0, 5, 15, 16, 19]]),
])
def test_node_partition_matches_go(rows, nodes, seed, want):
    assert node_partition(rows, nodes, seed) == want


def test_node_partition_errors_and_node_of():
    with pytest.raises(ValueError):
        node_partition([3, 0, 4], 3)
    with pytest.raises(ValueError):
        node_partition([3], 0)
    assert [node_of(r, 8, 2) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
