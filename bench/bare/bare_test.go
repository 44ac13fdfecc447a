package bare_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/bare"
	"github.com/cacheagent/cacheagent/bench/emulator"
)

// TestRead lists a prefix of 1,100 objects (names with spaces and
// subdirectories among them) and reads every object under it, none outside.
func TestRead(t *testing.T) {
	s, err := emulator.Start(emulator.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n, size = 1100, 1000
	for i := range n {
		if _, err := s.Put("bkt", fmt.Sprintf("data/d%d/obj %04d", i%3, i), emulator.Pattern(uint64(i), size)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put("bkt", "other/x", emulator.Pattern(0, 5)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := bare.Read(ctx, s.Endpoint(), 8, "bkt", "data/")
	if err != nil {
		t.Fatal(err)
	}
	if res.Objects != n || res.Bytes != n*size {
		t.Errorf("read %d objects, %d bytes; want %d, %d", res.Objects, res.Bytes, n, n*size)
	}
	if _, err := bare.Read(ctx, s.Endpoint(), 8, "nobucket", ""); err == nil {
		t.Error("reading a missing bucket: no error")
	}
}
