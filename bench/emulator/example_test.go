package emulator_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"cloud.google.com/go/storage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

// Start an emulator whose first download fails with a 503 and whose link
// delivers 100 MB/s per connection, then read an object through the real
// storage client, which retries.
func Example() {
	s, err := emulator.Start(emulator.Options{
		Shape: emulator.Shape{FirstByte: 5 * time.Millisecond, BytesPerSec: 100e6},
		Faults: func(_ *http.Request, n int) emulator.Fault {
			if n == 1 {
				return emulator.Fault{Status: http.StatusServiceUnavailable}
			}
			return emulator.Fault{}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put("data", "shard-0.npy", emulator.Pattern(1, 1<<20)); err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := storage.NewClient(ctx, option.WithEndpoint(s.Endpoint()), option.WithoutAuthentication())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	c.SetRetry(storage.WithBackoff(gax.Backoff{Initial: 10 * time.Millisecond}))
	r, err := c.Bucket("data").Object("shard-0.npy").NewReader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	fmt.Println(n, err, s.MediaGETs())
	// Output: 1048576 <nil> 2
}
