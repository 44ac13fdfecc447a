// Package emulator runs an in-process Google Cloud Storage emulator for
// tests, benchmarks and the demo command.
//
// It serves fake-gcs-server (memory backend) over real TCP on a loopback
// port, behind the HTTP middleware of package linkshape, which injects
// faults (error statuses, stalls, resets, truncated or corrupted bodies) and
// shapes object downloads like a real link (time to first byte, bytes per
// second per connection).
//
// Point a storage client at it with
//
//	storage.NewClient(ctx, option.WithEndpoint(s.Endpoint()), option.WithoutAuthentication())
//
// or set STORAGE_EMULATOR_HOST to s.Addr(). Always bound reads with a
// context deadline: the client retries a persistent 503 forever.
//
// Both the client's default XML reads (GET /bucket/object) and JSON media
// reads (?alt=media) are served; only these "media GETs" are counted, faulted
// and shaped. Metadata, list and upload requests pass through untouched.
//
// # Concurrency
//
// A Server is safe for concurrent use. SetFaults and SetShape take effect for
// media GETs that start after the call.
//
// # Lifetime
//
// Close stops the listener, cancels every in-flight request (stalls and pacing
// waits end at once) and returns after every handler has returned.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/linkshape"
)

// ErrInvalidObject is returned by Put for an empty bucket or object name.
var ErrInvalidObject = errors.New("emulator: empty bucket or object name")

// Options configures Start. The zero value is a valid, empty emulator.
type Options struct {
	// Objects are created at start, in order; missing buckets are created
	// (without versioning). A zero Generation is assigned like Put does.
	Objects []fakestorage.Object
	// Buckets are extra empty buckets to create.
	Buckets []string
	// Versioned are buckets created with object versioning enabled, before
	// Objects are added, so overwritten generations stay readable.
	Versioned []string
	// Faults decides the fault for each media GET; nil injects none.
	Faults FaultPlan
	// Shape models the network link for media GETs; the zero value is an
	// unshaped loopback link.
	Shape Shape
	// Dir, if set, keeps the objects in files under this directory
	// (fake-gcs-server's filesystem backend) instead of in memory. The
	// memory backend finds an object by formatting and comparing the name
	// of every object in its bucket, so each request costs O(objects):
	// benchmarks of many small objects measure the emulator unless they
	// set Dir. The filesystem backend keeps one generation per object
	// (no versioned buckets).
	Dir string
}

// Server is a running emulator. Create it with Start and stop it with Close.
// Its methods are safe for concurrent use.
type Server struct {
	// Immutable after Start.
	fake   *fakestorage.Server
	http   *http.Server
	addr   string
	files  bool               // objects in files (Options.Dir): the backend assigns generations
	cancel context.CancelFunc // cancels the base context of every request

	link *linkshape.Link // counts, faults and shapes media GETs

	lastGen atomic.Int64 // last generation handed out by nextGeneration

	composeMu sync.Mutex // serialises composes, so their precondition check holds

	serving   sync.WaitGroup // the Serve goroutine
	closeOnce sync.Once

	// mu protects closed; handlers holds one count per running handler and
	// is only incremented under mu.RLock while !closed, so Close's Wait
	// cannot race with an Add.
	mu       sync.RWMutex
	closed   bool
	handlers sync.WaitGroup
}

// Start creates the emulator, seeds it from opts and starts serving on a
// fresh 127.0.0.1 port. The caller must Close it.
func Start(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("emulator: listen: %w", err)
	}
	addr := ln.Addr().String()
	fake, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		StorageRoot: opts.Dir,
		NoListener:  true,
		Scheme:      "http",
		Host:        "127.0.0.1",
		// No port: XML reads are routed on Host 127.0.0.1 with any port.
		PublicHost: "127.0.0.1",
		// Resumable upload sessions are announced at this URL.
		ExternalURL: "http://" + addr,
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("emulator: create fake: %w", err)
	}
	s := &Server{fake: fake, addr: addr, files: opts.Dir != ""}
	s.link = linkshape.New(fake.HTTPHandler(), opts.Shape, opts.Faults)
	if err := s.seed(opts); err != nil {
		ln.Close()
		fake.Stop()
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.http = &http.Server{
		Handler:           http.HandlerFunc(s.handle),
		ReadHeaderTimeout: time.Minute,
		// Aborted responses (resets, cut bodies) are the point, not news.
		ErrorLog:    log.New(io.Discard, "", 0),
		BaseContext: func(net.Listener) context.Context { return base },
	}
	s.serving.Go(func() { s.http.Serve(ln) }) // returns ErrServerClosed on Close
	return s, nil
}

// seed creates the buckets and objects of opts.
func (s *Server) seed(opts Options) error {
	versioned := make(map[string]bool, len(opts.Versioned))
	for _, b := range opts.Versioned {
		if b == "" {
			return fmt.Errorf("emulator: create versioned bucket: %w", ErrInvalidObject)
		}
		versioned[b] = true
		s.fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b, VersioningEnabled: true})
	}
	for _, b := range opts.Buckets {
		if b == "" {
			return fmt.Errorf("emulator: create bucket: %w", ErrInvalidObject)
		}
		if !versioned[b] { // recreating with other settings would panic
			s.fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b})
		}
	}
	for _, o := range opts.Objects {
		if _, err := s.create(o); err != nil {
			return err
		}
	}
	return nil
}

// Addr returns the listening address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.addr }

// Endpoint returns the JSON API endpoint for option.WithEndpoint,
// "http://127.0.0.1:PORT/storage/v1/".
func (s *Server) Endpoint() string { return "http://" + s.addr + "/storage/v1/" }

// Fake returns the underlying fake-gcs-server, to create or overwrite objects
// directly. Its HTTP methods (Client, HTTPClient, URL) bypass this emulator
// and must not be used.
func (s *Server) Fake() *fakestorage.Server { return s.fake }

// SetFaults replaces the fault plan; nil disables fault injection.
func (s *Server) SetFaults(plan FaultPlan) { s.link.SetFaults(plan) }

// SetShape replaces the link model; the zero Shape disables shaping.
func (s *Server) SetShape(sh Shape) { s.link.SetShape(sh) }

// MediaGETs returns the number of object media GETs received so far,
// faulted ones included.
func (s *Server) MediaGETs() int64 { return s.link.Stats().MediaGETs }

// BytesServed returns the number of media GET body bytes written to clients
// so far (bytes swallowed by a truncation fault are not counted).
func (s *Server) BytesServed() int64 { return s.link.Stats().BytesServed }

// Put creates or overwrites bucket/name with a copy of data, creating the
// bucket if needed, and returns the new generation. Generations handed out
// by Put are strictly increasing.
func (s *Server) Put(bucket, name string, data []byte) (generation int64, err error) {
	return s.create(fakestorage.Object{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: name},
		Content:     data,
	})
}

// create stores o, assigning a fresh generation when o has none.
func (s *Server) create(o fakestorage.Object) (int64, error) {
	if o.BucketName == "" || o.Name == "" {
		return 0, fmt.Errorf("emulator: put %q/%q: %w", o.BucketName, o.Name, ErrInvalidObject)
	}
	if s.files {
		// The filesystem backend assigns generations itself.
		if err := s.fake.CreateObjectStreaming(o.StreamingObject()); err != nil {
			return 0, fmt.Errorf("emulator: put gs://%s/%s: %w", o.BucketName, o.Name, err)
		}
		got, err := s.fake.GetObject(o.BucketName, o.Name)
		if err != nil {
			return 0, fmt.Errorf("emulator: put gs://%s/%s: %w", o.BucketName, o.Name, err)
		}
		return got.Generation, nil
	}
	if o.Generation == 0 {
		o.Generation = s.nextGeneration()
	}
	if err := s.fake.CreateObjectStreaming(o.StreamingObject()); err != nil {
		return 0, fmt.Errorf("emulator: put gs://%s/%s: %w", o.BucketName, o.Name, err)
	}
	return o.Generation, nil
}

// nextGeneration returns a generation like GCS's (microseconds since the
// epoch), strictly greater than any it returned before.
func (s *Server) nextGeneration() int64 {
	for {
		last := s.lastGen.Load()
		g := max(time.Now().UnixMicro(), last+1)
		if s.lastGen.CompareAndSwap(last, g) {
			return g
		}
	}
}

// Close stops the listener, cancels in-flight requests, waits for every
// handler to return and stops the fake. Calls after the first wait for it
// and do nothing else.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.http.Close() // closes the listener and every tracked connection
		s.handlers.Wait()
		s.serving.Wait()
		s.fake.Stop()
	})
}

// enter registers a handler; it reports false once Close has begun.
func (s *Server) enter() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	s.handlers.Add(1)
	return true
}
