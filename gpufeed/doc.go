// Package gpufeed feeds a loader's batches to one GPU: each batch is
// gathered straight into pinned host memory, copied asynchronously into
// device memory of its own, and handed to the consumer with the device
// addresses of its arrays and an event that says when the copy is done.
//
// # Usage
//
//	dev, err := backend.Open(ctx, 0) // gpu.Backend from gpu.Open
//	…
//	f, err := gpufeed.New(ctx, dev, loader.FromStore(store), gpufeed.Config{Loader: cfg})
//	…
//	defer f.Close()
//	for {
//		b, err := f.Next(ctx)
//		if err == io.EOF {
//			break
//		}
//		…
//		if err := b.Ready(ctx); err != nil { … } // waits for the copy
//		train(b.Device[0].Ptr, b.Device[1].Ptr, b.IDs)
//		b.Release() // once the device is done reading the batch
//	}
//
// # Design
//
// The Loader already owns a fixed set of batch slots (Config.Prefetch),
// each with one buffer per array, allocated once in New and regathered
// after the consumer releases the slot's batch. The Feed plugs into its two
// seams: NewBuffer allocates each buffer as pinned host memory
// (gpu.Device.HostAlloc) and, beside it, a device buffer of the same size;
// OnBatch, which runs in the gathering goroutine right after a batch is
// gathered, enqueues one asynchronous host-to-device copy per array on the
// slot's stream and records an event after them. Next returns the batch
// at once; Batch.Ready waits for the event.
//
// HostAlloc, not a gpu.Pool: the Loader's slots already are a fixed pool of
// buffers with their own rotation (a slot is regathered only after its
// batch is released), and a Pool would be a second rotation that never
// turns: its buffers would be taken once in NewBuffer and never put back.
// What the Pool guarantees, that a buffer is not refilled under its own
// DMA, the Feed guarantees at Release: it gives the slot back to the Loader
// only once the slot's copy event has completed (waiting for it if the
// consumer did not call Ready). A slot's device buffers are written only by
// the copies of the slot's next batch, which the Loader gathers only after
// that Release, so they never change under a consumer that holds the
// batch. A consumer whose own device work still reads the batch when it is
// done on the host calls ReleaseAfter with an event recorded after that
// work: the next copy into the slot waits for it.
//
// The Feed sets loader.Config.CopyAlways: a zero-copy batch aliases a
// shard's mapping, which is pageable, and a copy from pageable memory goes
// through the driver's staging synchronously (two host copies instead of
// one, and the gathering goroutine blocked for the transfer).
//
// # Double buffering
//
// With Prefetch ≥ 2 the Loader gathers batch i+1 into another slot while
// batch i's copy runs: OnBatch only enqueues, so gathering, copying and the
// consumer's work overlap. Each slot holds its buffers' worth of pinned
// host memory and of device memory: Prefetch × (BatchSize × row bytes of
// all arrays) of each.
//
// # Streams
//
// Each slot has its own stream. OnBatch runs concurrently in several
// gathering goroutines, but a slot is gathered by one goroutine at a time,
// so each stream is used by one goroutine at a time, as gpu.Stream
// requires, with no lock; copies of different slots may overlap on the
// device. Order is kept by the Loader: Next returns batches in order, each
// with its own event.
//
// # Stats
//
// Stats counts the copies and bytes enqueued, the time the consumer was
// blocked waiting for copies (in Ready, or Release without Ready) and in
// Next (the Loader's stalls), and the time since the first Next, whose
// ratio CopyWaitShare is the figure to keep small: the share of the
// consumer's time lost to copies not yet done.
//
// # Lifetimes
//
// The Feed owns what it allocates: pinned host and device buffers, one
// stream per slot, the events. Close waits for every copy in flight, closes
// the Loader and frees them; batches still held are invalid afterwards
// (their memory is gone; Release is still safe). The device is the
// caller's: close the Feed before it. Pinned memory is allocated and freed
// only in New and Close (freeing it synchronizes the device).
//
// # No GPU
//
// A Feed needs a device; the None backend has none (its Open fails with
// gpu.ErrNoGPU). The fallback without a GPU is the Loader itself, which the
// Feed only adds copies to: callers that find no device read batches from
// loader.New with the same Config.
//
// # Concurrency
//
// Next must not be called concurrently with itself; State, Stats and Close
// may be called from any goroutine, and so may a Batch's Ready and Release
// (but not concurrently with each other for the same batch). Locks: Feed.mu
// is held for reading by Ready and Release while they use a batch's event,
// and for writing by Close while it closes events and frees memory; it is
// never held while calling the Loader's Next. The Feed starts no
// goroutines of its own: the Loader's, and the device's stream goroutines
// for the Fake, are waited for by their owners' Close.
//
// # Errors
//
// Conditions callers test: ErrConfig, ErrClosed, ErrReleased, io.EOF from
// Next, and the Loader's and device's errors (gpu.ErrOutOfMemory, …), all
// wrapped with details. A copy that fails to enqueue fails its batch: Next
// returns the error, as for a gather failure. A copy that fails on the
// device is reported by Ready (or, if the consumer skipped Ready, by the
// next Next).
package gpufeed
