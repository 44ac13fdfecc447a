package object

import (
	"fmt"
	"sync/atomic"
)

// Priority orders downloads competing for the connection budget.
type Priority int32

// Priorities, lowest first.
const (
	// Warm is background warming of configured sources.
	Warm Priority = iota
	// Plan is prefetching for an announced access order.
	Plan
	// Demand is a reader blocked on the object right now.
	Demand
)

// String returns the priority's name.
func (p Priority) String() string {
	switch p {
	case Warm:
		return "warm"
	case Plan:
		return "plan"
	case Demand:
		return "demand"
	}
	return fmt.Sprintf("priority(%d)", int32(p))
}

// Urgency is a download's priority, shared by everyone waiting on that
// download and raised when a more urgent waiter joins (a demand read joining a
// warm prefetch). The zero value is Warm. Safe for concurrent use.
type Urgency struct{ p atomic.Int32 }

// NewUrgency returns an Urgency at p.
func NewUrgency(p Priority) *Urgency {
	u := new(Urgency)
	u.p.Store(int32(p))
	return u
}

// Level returns the current priority.
func (u *Urgency) Level() Priority { return Priority(u.p.Load()) }

// Raise lifts the priority to p if p is higher; it never lowers it.
func (u *Urgency) Raise(p Priority) {
	for {
		cur := u.p.Load()
		if int32(p) <= cur || u.p.CompareAndSwap(cur, int32(p)) {
			return
		}
	}
}
