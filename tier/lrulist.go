package tier

// lruList is a store's LRU: its live unpinned copies, most recently used
// at the front. It is intrusive (the links are the entries' prev and next
// fields), so a cached object costs no list element: one allocation and
// four pointers fewer per copy for the garbage collector to trace than
// container/list. The zero value is not usable: call init. Guarded by
// Cache.mu like the rest of the store.
//
// INVARIANT: the list is circular through root; a copy is linked iff its
// next is non-nil; n is the number of linked copies.
type lruList struct {
	root entry // sentinel: root.next is the front, root.prev the back
	n    int
}

// init empties the list.
func (l *lruList) init() {
	l.root.next, l.root.prev = &l.root, &l.root
	l.n = 0
}

// len returns the number of linked copies.
func (l *lruList) len() int { return l.n }

// front returns the most recently used copy, nil if the list is empty.
func (l *lruList) front() *entry { return l.unroot(l.root.next) }

// back returns the least recently used copy, nil if the list is empty.
func (l *lruList) back() *entry { return l.unroot(l.root.prev) }

// prev returns the copy used just after e (towards the front), nil if e is
// the front.
func (l *lruList) prev(e *entry) *entry { return l.unroot(e.prev) }

// unroot maps the sentinel to nil.
func (l *lruList) unroot(e *entry) *entry {
	if e == &l.root {
		return nil
	}
	return e
}

// pushFront links unlinked copy e at the front.
func (l *lruList) pushFront(e *entry) { l.insertAfter(e, &l.root) }

// insertAfter links unlinked copy e just behind at (towards the back):
// e is then the copy used just before at.
func (l *lruList) insertAfter(e, at *entry) {
	e.prev, e.next = at, at.next
	at.next.prev = e
	at.next = e
	l.n++
}

// remove unlinks linked copy e.
func (l *lruList) remove(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
	e.prev, e.next = nil, nil
	l.n--
}

// moveToFront makes linked copy e the most recently used.
func (l *lruList) moveToFront(e *entry) {
	if l.root.next == e {
		return
	}
	l.remove(e)
	l.pushFront(e)
}
