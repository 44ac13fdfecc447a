package gpu

import (
	"errors"
	"slices"
	"testing"
)

func TestLifetime(t *testing.T) {
	l := newLifetime()
	var freed []int
	tickets := make([]*ticket, 3)
	for i := range tickets {
		tickets[i] = must2[*ticket](t)(l.track(func() error { freed = append(freed, i); return nil }))
	}
	must(t, tickets[1].release())
	if err := tickets[1].release(); !errors.Is(err, ErrClosed) {
		t.Errorf("second release = %v; want ErrClosed", err)
	}
	if err := tickets[1].alive(); !errors.Is(err, ErrClosed) {
		t.Errorf("alive after release = %v; want ErrClosed", err)
	}
	must(t, tickets[0].alive())
	must(t, l.close())
	if want := []int{1, 2, 0}; !slices.Equal(freed, want) {
		t.Errorf("freed %v; want %v (released one, then newest first)", freed, want)
	}
	if err := tickets[0].release(); err != nil {
		t.Errorf("release after close = %v; want nil", err)
	}
	if err := tickets[2].alive(); !errors.Is(err, ErrClosed) {
		t.Errorf("alive after close = %v; want ErrClosed", err)
	}
	if err := l.close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second close = %v; want ErrClosed", err)
	}
	late := false
	if _, err := l.track(func() error { late = true; return nil }); !errors.Is(err, ErrClosed) || !late {
		t.Errorf("track after close = %v, freed %t; want ErrClosed and freed", err, late)
	}
}
