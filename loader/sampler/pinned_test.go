package sampler

// Known outputs of TestPinnedOrders (rows 4,4,4,4; seed 7; epoch 1).
var (
	pinnedWindow = []int64{11, 8, 13, 10, 12, 15, 9, 14, 6, 7, 5, 1, 2, 3, 0, 4}
	pinnedGlobal = []int64{2, 10, 14, 6, 15, 13, 1, 0, 5, 8, 4, 3, 7, 9, 11, 12}
)

// Known outputs of TestNodePinned (rows 4,4,4,4,9,2,6; seed 7; 3 nodes;
// node 1's one rank, epoch 1, window 2: 10 samples padded to 12).
var (
	pinnedPartition = [][]int{{4, 5}, {2, 6}, {0, 1, 3}}
	pinnedNode      = []int64{29, 11, 27, 30, 8, 32, 10, 31, 28, 9, 28, 9}
)
