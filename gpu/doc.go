// Package gpu moves batches from host memory to GPUs: device discovery,
// pinned staging buffers, registration of shared-memory shards, and
// asynchronous host-to-device copies ordered by streams and events.
//
// # Backends
//
// A Backend is opened with Open(ctx, mode) or OpenConfig:
//
//   - cuda: the NVIDIA driver, loaded at run time (package gpu/cuda, no
//     toolkit needed to build), with topology from NVML (package
//     gpu/nvmlinfo) and sysfs, matched to CUDA devices by PCI bus id.
//   - fake: Fake, an in-process model with the same ordering rules, for
//     tests and demos; it reports buffer reuse a real GPU would not.
//   - none: None, no GPU; Open fails with ErrNoGPU and Reason says why.
//
// ModeAuto tries cuda and falls back to none with one log line; ModeCUDA
// fails instead. The Device, Stream and Event interfaces are the seam
// between the backends and the loader; the loader declares the smaller
// interfaces it uses.
//
// # Copying a batch
//
// A loader gathers rows into a staging buffer from a Pool, copies it on a
// stream into device memory and records an event; the buffer goes back to
// the pool with that event and is handed out again only after the copy has
// completed. With two or more buffers the next gather overlaps the copy:
//
//	buf, err := pool.Get(ctx)         // waits for this buffer's last copy
//	n := gather(buf.Bytes())          // memcpy rows, several goroutines
//	err = stream.CopyHtoD(ctx, slot, 0, buf.Bytes()[:n])
//	ready, err := stream.Record(ctx)  // the batch's readiness
//	reuse, err := stream.Record(ctx)
//	err = pool.Put(buf, reuse)        // the pool owns reuse now
//	// hand (slot.Ptr(), ready) to the consumer; it waits on ready.
//
// Shards read many times can instead be registered whole (Register, with
// readOnly for PROT_READ mappings) and copied from directly.
//
// # Concurrency
//
// Backends, devices and events are safe for concurrent use; a stream is
// used by one goroutine at a time. Closing must not race with use. No
// method keeps a goroutine running after it returns except the Fake's
// stream goroutines, owned by their device (Close waits for them), and a
// CUDA event's waiter, owned by the event (Close waits for it).
//
// # NUMA
//
// Pinned memory is allocated from an OS thread bound to the CPUs local to
// the GPU (NVML, else sysfs local_cpulist), so the kernel's default policy
// takes the pages from the GPU's node: a preference, not a guarantee (a node
// short of memory falls back; numactl --membind overrides). HostMem.NUMANode
// says whether the binding took. Pinned host memory is not limited by
// RLIMIT_MEMLOCK, but counts against RAM and the container's memory limit.
//
// # Errors
//
// Errors name the device and operation and wrap the cause: for CUDA an
// error like "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)" that matches
// both ErrOutOfMemory and cuda.ErrOutOfMemory. Test with errors.Is.
//
// # Lifetimes
//
// What a device makes belongs to it; Device.Close frees whatever is left,
// newest first, and releases the CUDA context. Free pinned memory and
// unregister at shutdown, not per batch: both synchronize the device.
// Unregister before unmapping. Nothing relies on finalizers.
package gpu
