// Package gpubench measures host-to-device copy paths on one GPU: from a
// pinned buffer, from pageable memory, through the staging pool, and from a
// registered read-only /dev/shm mapping (as the shm tier maps shards), each
// against the device's PCIe link ceiling. `cacheagent bench gpu` runs it.
package gpubench
