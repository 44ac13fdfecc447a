package ring

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// allMessages has one message of each type.
var allMessages = []any{
	Hello{Protocol: Protocol, Session: "0123456789ab", Token: strings.Repeat("f", 32)},
	Release{Slot: 3, Seq: 1 << 40},
	StateRequest{},
	Seek{Epoch: 2, Batch: 5},
	Welcome{Protocol: Protocol, RingBytes: 1 << 30, SlotBytes: 1 << 20, Slots: 1024, Arrays: 3},
	Ready{Slot: 1, Seq: 9, Epoch: 3, Index: 4, N: 256},
	EpochEnd{Epoch: 3, Batches: 10},
	End{Epoch: 4},
	StateIs{Epoch: 1, Batch: 2, Fingerprint: 1<<64 - 1},
	&Error{Code: CodeRefused, Text: "no such session ✓"},
}

func TestMessagesRoundTrip(t *testing.T) {
	for _, m := range allMessages {
		b := Append(nil, m)
		got, err := DecodeMessage(b)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("DecodeMessage(Append(%#v)) = %#v, %v", m, got, err)
		}
		if _, err := DecodeMessage(append(b, 0)); err == nil && reflect.TypeOf(m) != reflect.TypeOf(&Error{}) {
			t.Errorf("DecodeMessage of %T with a byte more succeeded", m)
		}
	}
	long := Append(nil, &Error{Text: strings.Repeat("é", MaxMessage)})
	if len(long) > MaxMessage {
		t.Errorf("an Error message of %d bytes; at most %d", len(long), MaxMessage)
	}
	if _, err := DecodeMessage(long); err != nil {
		t.Errorf("a cut Error text does not decode: %v", err)
	}
}

// FuzzDecodeMessage checks that DecodeMessage never panics and that what
// it accepts encodes back to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range allMessages {
		f.Add(Append(nil, m))
	}
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			if !errors.Is(err, ErrMessage) {
				t.Fatalf("error %v does not wrap ErrMessage", err)
			}
			return
		}
		if _, ok := m.(Hello); ok {
			return // NUL padding: the strings may end early
		}
		if got := Append(nil, m); string(got) != string(b) && !isPadded(m) {
			t.Fatalf("Append(DecodeMessage(%x)) = %x", b, got)
		}
	})
}

// isPadded reports messages whose padding bytes DecodeMessage ignores.
func isPadded(m any) bool {
	switch m.(type) {
	case StateRequest, Seek, EpochEnd, End, StateIs, Ready:
		return true
	}
	return false
}

func TestRingMemfd(t *testing.T) {
	r, err := New("test-ring", 3, 2*Align)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.Bytes()) != 6*Align || len(r.Slot(2)) != 2*Align {
		t.Fatalf("ring of %d bytes, slot of %d", len(r.Bytes()), len(r.Slot(2)))
	}
	seals, err := unix.FcntlInt(uintptr(r.Fd()), unix.F_GET_SEALS, 0)
	if err != nil || seals&Seals != Seals {
		t.Errorf("seals = %#x, %v; want %#x", seals, err, Seals)
	}
	if err := unix.Ftruncate(r.Fd(), 1); err == nil {
		t.Error("a sealed ring could be shrunk")
	}
	link, _ := os.Readlink(filepath.Join("/proc/self/fd", strconv.Itoa(r.Fd())))
	if !strings.HasPrefix(link, "/memfd:test-ring") {
		t.Errorf("the ring's fd links to %q; want an anonymous memfd", link)
	}
	if _, err := os.Stat("/dev/shm/test-ring"); err == nil {
		t.Error("a file in /dev/shm")
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
}

// TestConnFd passes a ring over a socketpair and maps it at the other end.
func TestConnFd(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = NewConn(c.(*net.UnixConn))
		defer conns[i].Close()
	}
	r, err := New("conn-test", 2, Align)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	copy(r.Slot(1), "hello")
	w := Welcome{Protocol: Protocol, RingBytes: 2 * Align, SlotBytes: Align, Slots: 2, Arrays: 1}
	if err := conns[0].SendFd(w, r.Fd()); err != nil {
		t.Fatal(err)
	}
	m, fd, err := conns[1].RecvFd()
	if err != nil || m != w {
		t.Fatalf("RecvFd = %v, %v; want %v", m, err, w)
	}
	mp, err := Map(fd, w.RingBytes, w.SlotBytes)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Unmap()
	if got := string(mp.Slot(1)[:5]); got != "hello" {
		t.Errorf("mapped slot 1 = %q", got)
	}
	mp.Slot(0)[0] = 'w' // shared, read-write
	if r.Slot(0)[0] != 'w' {
		t.Error("a write through the client's mapping does not show in the ring")
	}
	if mp.Slot(2) != nil {
		t.Error("Slot(2) of 2 slots is not nil")
	}
	// A message that needs a descriptor but comes without one.
	conns[0].Send(StateRequest{})
	if _, _, err := conns[1].RecvFd(); !errors.Is(err, ErrMessage) {
		t.Errorf("RecvFd without a descriptor = %v; want ErrMessage", err)
	}
	conns[0].Close()
	if _, err := conns[1].Recv(); err == nil {
		t.Error("Recv after the peer closed succeeded")
	}
}
