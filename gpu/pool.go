package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// PoolConfig sizes a staging pool.
type PoolConfig struct {
	// Buffers is the number of staging buffers; 0 means 4. Two give double
	// buffering (fill one while the other is copied); more absorb jitter.
	Buffers int
	// Size is each buffer's size in bytes; 0 means 64 MiB. Copies of 16 MiB
	// and more reach the link's peak.
	Size int
}

// Pool is a fixed set of pinned staging buffers on one device: fill a
// buffer with gathered rows, copy it to the device on a stream, and give it
// back with an event recorded after the copy. The pool hands a buffer out
// again only once that event has completed, so a buffer is never
// overwritten under its own DMA. Its footprint is fixed and allocated up
// front (pinned allocation is slow, and freeing it synchronizes the
// device), NUMA-local where the device knows its node (Device.HostAlloc).
//
// Get and Put are safe for concurrent use; Close must not race with them.
type Pool struct {
	size int
	bufs []*Staging    // all buffers; immutable after NewPool
	free chan *Staging // buffers not handed out, oldest return first
}

// Staging is one buffer of a Pool, handed out by Get.
type Staging struct {
	mem   *HostMem
	pool  *Pool
	out   atomic.Bool // handed out by Get, not yet Put
	after Event       // completes when the buffer's last copy has; nil if none; owned by the buffer's holder
}

// Bytes returns the whole buffer (Size bytes). It is the caller's between
// Get and Put.
func (s *Staging) Bytes() []byte { return s.mem.Bytes() }

// NUMANode returns the NUMA node the buffer was allocated on, -1 if unknown.
func (s *Staging) NUMANode() int { return s.mem.NUMANode() }

// NewPool allocates cfg.Buffers pinned buffers of cfg.Size bytes on dev.
func NewPool(ctx context.Context, dev Device, cfg PoolConfig) (*Pool, error) {
	if cfg.Buffers == 0 {
		cfg.Buffers = 4
	}
	if cfg.Size == 0 {
		cfg.Size = 64 << 20
	}
	if cfg.Buffers < 1 || cfg.Size < 1 {
		return nil, fmt.Errorf("gpu: pool of %d buffers of %d bytes: %w", cfg.Buffers, cfg.Size, ErrInvalid)
	}
	p := &Pool{size: cfg.Size, free: make(chan *Staging, cfg.Buffers)}
	for range cfg.Buffers {
		m, err := dev.HostAlloc(ctx, cfg.Size)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("gpu: staging pool: %w", err), p.freeAll())
		}
		s := &Staging{mem: m, pool: p}
		p.bufs = append(p.bufs, s)
		p.free <- s
	}
	return p, nil
}

// Size returns each buffer's size in bytes.
func (p *Pool) Size() int { return p.size }

// Len returns the number of buffers.
func (p *Pool) Len() int { return len(p.bufs) }

// Get returns a buffer whose last copy has completed, waiting for one if
// necessary, or ctx's error. If that copy failed, Get returns the buffer to
// the pool and the copy's error.
func (p *Pool) Get(ctx context.Context) (*Staging, error) {
	var s *Staging
	select {
	case s = <-p.free:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.after != nil {
		err := s.after.Wait(ctx)
		if err != nil && ctx.Err() != nil {
			p.free <- s // still in flight: keep its event
			return nil, err
		}
		s.after.Close()
		s.after = nil
		if err != nil {
			p.free <- s
			return nil, fmt.Errorf("gpu: staging buffer's last copy: %w", err)
		}
	}
	s.out.Store(true)
	return s, nil
}

// Put returns s to the pool. after, if not nil, must be an event recorded
// after every copy from s; the pool takes it over (and closes it) even when
// Put fails. Pass nil only if nothing was enqueued from s, or after
// synchronizing. Put never blocks.
func (p *Pool) Put(s *Staging, after Event) error {
	if s == nil || s.pool != p || !s.out.CompareAndSwap(true, false) {
		if after != nil {
			after.Close()
		}
		return fmt.Errorf("gpu: staging buffer put twice or into the wrong pool: %w", ErrClosed)
	}
	s.after = after
	p.free <- s
	return nil
}

// Close waits for every buffer to be back and its last copy to complete,
// then frees the buffers. If ctx ends first, Close frees nothing, leaves
// the pool as it was and returns ctx's error. Close the pool before its
// device: a device's Close frees the buffers and events under the pool.
func (p *Pool) Close(ctx context.Context) error {
	taken := make([]*Staging, 0, len(p.bufs))
	giveBack := func(err error) error {
		for _, s := range taken {
			p.free <- s
		}
		return fmt.Errorf("gpu: closing staging pool: %w", err)
	}
	for range p.bufs {
		select {
		case s := <-p.free:
			taken = append(taken, s)
		case <-ctx.Done():
			return giveBack(ctx.Err())
		}
	}
	var errs []error
	for _, s := range taken {
		if s.after == nil {
			continue
		}
		if err := s.after.Wait(ctx); err != nil && ctx.Err() != nil {
			return giveBack(err)
		} else if err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, s.after.Close())
		s.after = nil
	}
	return errors.Join(append(errs, p.freeAll())...)
}

func (p *Pool) freeAll() error {
	var errs []error
	for _, s := range p.bufs {
		errs = append(errs, s.mem.Free())
	}
	return errors.Join(errs...)
}
