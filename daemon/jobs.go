package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// keepFinished is how many finished jobs are remembered.
const keepFinished = 256

// listProgressEvery is how often (in objects) a listing job reports.
const listProgressEvery = 1000

// jobSpec says what a job prefetches: a prefix to list, or given objects.
type jobSpec struct {
	kind    string
	uri     string // gs://bucket/prefix, or a description
	bucket  string
	prefix  string
	objects []object.Attrs // if not nil, prefetched instead of listing
	prio    object.Priority
}

// jobManager runs prefetch jobs, each in its own goroutine, and remembers
// finished ones. Lock order: jobManager.mu before job.mu.
type jobManager struct {
	// Set once before the first job.
	cache *tier.Cache
	src   object.Source
	// prefetch, if set, fills a job's objects instead of cache.Prefetch
	// (a fleet node's, which may leave objects to their owners).
	prefetch func(ctx context.Context, objs []object.Attrs, p object.Priority, progress func(tier.Progress)) error
	log      *slog.Logger
	// onChange, if set, is called when a job starts and after it ends.
	onChange func()
	// onList, if set, is given the objects of each job before they are
	// prefetched (the dataset a fleet node balances its owners over), and
	// returns them in the order to prefetch them. With neither onList nor
	// prefetch set, a job prefetches the objects of its prefix as they are
	// listed (tier.Cache.PrefetchSeq).
	onList func(uri string, objs []object.Attrs) []object.Attrs

	running sync.WaitGroup // job goroutines

	mu     sync.Mutex // protects the fields below
	closed bool
	byID   map[string]*job
	order  []*job // creation order
}

func newJobManager(log *slog.Logger) *jobManager {
	return &jobManager{log: log, byID: make(map[string]*job)}
}

// start creates a job and starts it.
func (m *jobManager) start(spec jobSpec) (*job, error) {
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{id: newID(), spec: spec, created: time.Now(), cancel: cancel,
		state: control.JobListing, changed: make(chan struct{}), done: make(chan struct{})}
	if spec.objects != nil {
		j.state = control.JobRunning
		j.prog.Objects = len(spec.objects)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("daemon: start job: %w", control.ErrUnavailable)
	}
	m.byID[j.id] = j
	m.order = append(m.order, j)
	m.forgetLocked()
	m.running.Go(func() { m.run(ctx, j) })
	m.mu.Unlock()
	if m.onChange != nil {
		m.onChange()
	}
	m.log.Info("job started", "job", j.id, "kind", spec.kind, "uri", spec.uri, "priority", spec.prio.String())
	return j, nil
}

// forgetLocked drops the oldest finished jobs beyond keepFinished.
func (m *jobManager) forgetLocked() {
	finished := 0
	for _, j := range m.order {
		if j.final() {
			finished++
		}
	}
	kept := m.order[:0]
	for _, j := range m.order {
		if finished > keepFinished && j.final() {
			finished--
			delete(m.byID, j.id)
			continue
		}
		kept = append(kept, j)
	}
	clear(m.order[len(kept):])
	m.order = kept
}

// run lists (unless the spec has objects) and prefetches.
func (m *jobManager) run(ctx context.Context, j *job) {
	defer j.cancel()
	var err error
	switch objs := j.spec.objects; {
	case objs == nil && m.onList == nil && m.prefetch == nil:
		j.update(func() { j.state = control.JobRunning })
		err = m.cache.PrefetchSeq(ctx, m.src.List(ctx, j.spec.bucket, j.spec.prefix), j.spec.prio, 0,
			func(p tier.Progress) { j.update(func() { j.prog, j.listed = p, p.Objects }) })
	default:
		if objs == nil {
			objs, err = m.list(ctx, j)
		}
		if err == nil && m.onList != nil {
			objs = m.onList(j.spec.uri, objs)
		}
		if err == nil {
			j.update(func() { j.state = control.JobRunning })
			prefetch := m.cache.Prefetch
			if m.prefetch != nil {
				prefetch = m.prefetch
			}
			err = prefetch(ctx, objs, j.spec.prio, func(p tier.Progress) { j.update(func() { j.prog = p }) })
		}
	}
	j.finish(ctx, err)
	if m.onChange != nil {
		m.onChange()
	}
	snap := j.snapshot()
	attrs := []any{"job", j.id, "uri", j.spec.uri, "state", snap.State}
	if err != nil {
		m.log.Warn("job ended", append(attrs, "err", snap.Error)...)
		return
	}
	m.log.Info("job ended", attrs...)
}

// list collects the objects under the job's prefix.
func (m *jobManager) list(ctx context.Context, j *job) ([]object.Attrs, error) {
	var objs []object.Attrs
	for a, err := range m.src.List(ctx, j.spec.bucket, j.spec.prefix) {
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", j.spec.uri, err)
		}
		objs = append(objs, a)
		if len(objs)%listProgressEvery == 0 {
			j.update(func() { j.listed = len(objs) })
		}
	}
	j.update(func() { j.listed = len(objs) })
	return objs, nil
}

// get returns the job with the given id.
func (m *jobManager) get(id string) (*job, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.byID[id]
	return j, ok
}

// snapshots returns every job, oldest first.
func (m *jobManager) snapshots() []control.Job {
	m.mu.Lock()
	js := append([]*job(nil), m.order...)
	m.mu.Unlock()
	out := make([]control.Job, len(js))
	for i, j := range js {
		out[i] = j.snapshot()
	}
	return out
}

// cancelWhere cancels the jobs for which match(kind, uri) is true.
func (m *jobManager) cancelWhere(match func(kind, uri string) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.order {
		if match(j.spec.kind, j.spec.uri) {
			j.cancel()
		}
	}
}

// counts returns the number of jobs by state.
func (m *jobManager) counts() map[control.JobState]int {
	out := make(map[control.JobState]int)
	for _, j := range m.snapshots() {
		out[j.State]++
	}
	return out
}

// pending returns the objects that running jobs have yet to finish, by
// priority.
func (m *jobManager) pending() map[object.Priority]int {
	out := make(map[object.Priority]int)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.order {
		j.mu.Lock()
		if !j.state.Final() {
			out[j.spec.prio] += j.prog.Objects - j.prog.ObjectsDone
		}
		j.mu.Unlock()
	}
	return out
}

// close cancels every job and refuses new ones; wait waits for them.
func (m *jobManager) close() {
	m.mu.Lock()
	m.closed = true
	for _, j := range m.order {
		j.cancel()
	}
	m.mu.Unlock()
}

// wait waits for every job goroutine to return.
func (m *jobManager) wait() { m.running.Wait() }

// job is one prefetch job.
type job struct {
	// Immutable after start, except spec.objects, dropped under mu when
	// the job ends.
	id      string
	spec    jobSpec
	created time.Time
	cancel  context.CancelFunc
	done    chan struct{} // closed when the job reaches a final state

	mu       sync.Mutex // protects the fields below
	state    control.JobState
	listed   int
	prog     tier.Progress
	err      error
	finished time.Time
	changed  chan struct{} // closed and replaced on every change
}

// update applies fn under the job's lock and wakes watchers.
func (j *job) update(fn func()) {
	j.mu.Lock()
	fn()
	close(j.changed)
	j.changed = make(chan struct{})
	j.mu.Unlock()
}

// finish records the job's end.
func (j *job) finish(ctx context.Context, err error) {
	j.update(func() {
		j.finished, j.err = time.Now(), err
		j.spec.objects = nil // a plan's head can be long; the job is remembered a while
		switch {
		case err == nil:
			j.state = control.JobDone
		case ctx.Err() != nil && errors.Is(err, context.Canceled):
			j.state = control.JobCancelled
		default:
			j.state = control.JobFailed
		}
	})
	close(j.done)
}

// final reports whether the job has ended.
func (j *job) final() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.state.Final()
}

// snapshot returns the job's state.
func (j *job) snapshot() control.Job {
	s, _ := j.watch()
	return s
}

// watch returns the job's state and a channel closed at its next change.
func (j *job) watch() (control.Job, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p := j.prog
	s := control.Job{ID: j.id, Kind: j.spec.kind, URI: j.spec.uri, Priority: j.spec.prio.String(),
		State: j.state, Listed: j.listed, Created: j.created, Finished: j.finished,
		Progress: control.Progress{Objects: p.Objects, Bytes: p.Bytes, ObjectsDone: p.ObjectsDone,
			BytesDone: p.BytesDone, BytesFetched: p.BytesFetched, Cached: p.Cached, Failed: p.Failed,
			Listing: p.Listing}}
	if j.err != nil {
		s.Error = summarize(j.err)
	}
	return s, j.changed
}

// maxErrors is how many of a job's errors its summary spells out.
const maxErrors = 3

// summarize describes err in a bounded length: a prefetch of many objects
// can fail for each of them.
func summarize(err error) string {
	var multi interface{ Unwrap() []error }
	if !errors.As(err, &multi) || len(multi.Unwrap()) <= maxErrors {
		return err.Error()
	}
	errs := multi.Unwrap()
	var b strings.Builder
	for _, e := range errs[:maxErrors] {
		b.WriteString(e.Error())
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "… and %d more errors", len(errs)-maxErrors)
	return b.String()
}

// newID returns a random identifier of 12 hex digits.
func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
