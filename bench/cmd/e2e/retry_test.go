package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/linkshape"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// TestRetryingReadsThroughFaults reads objects through gcsproxy's link with
// a third of the downloads failing with 503 and a third reset mid-body.
func TestRetryingReadsThroughFaults(t *testing.T) {
	emu, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	const size = 200_000
	var want [][]byte
	for i := range 6 {
		data := emulator.Pattern(uint64(i), size)
		if _, err := emu.Put("bkt", fmt.Sprintf("o%d", i), data); err != nil {
			t.Fatal(err)
		}
		want = append(want, data)
	}
	tr := linkshape.NewTransport()
	defer tr.CloseIdleConnections()
	proxy, err := linkshape.Proxy("http://"+emu.Addr(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := linkshape.Random{Seed: 5, StatusRate: 0.3, ResetRate: 0.3, ResetWithin: 64 << 10}.Plan()
	if err != nil {
		t.Fatal(err)
	}
	link := linkshape.New(proxy, linkshape.Shape{}, plan)
	srv := httptest.NewServer(link)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i, data := range want {
		o := object.Object{Bucket: "bkt", Name: fmt.Sprintf("o%d", i)}
		off := int64(i * 1000)
		rc, err := retrying{src}.NewRangeReader(ctx, o, off, size-off)
		if err != nil {
			t.Fatalf("open %s: %v", o, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data[off:]) {
			t.Fatalf("read %s: %d bytes, error %v; want %d bytes of the object", o, len(got), err, size-off)
		}
	}
	if st := link.Stats(); st.Faulted == 0 {
		t.Errorf("link stats %+v: no download was faulted; the test proves nothing", st)
	}
	if _, err := (retrying{src}).NewRangeReader(ctx, object.Object{Bucket: "bkt", Name: "missing"}, 0, 1); err == nil {
		t.Error("reading a missing object: no error")
	}
}
