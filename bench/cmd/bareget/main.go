// Command bareget is the baseline of the small-object benchmarks: a bare
// client that lists a prefix and GETs every object on as many keep-alive
// connections, discarding the bytes, as a program reading a bucket without
// any cache would. It prints one line: objects, bytes, seconds, objects/s
// and the CPU seconds it used.
//
//	bareget -endpoint http://127.0.0.1:PORT/storage/v1/ -connections 32 gs://bench/data/
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

func main() {
	endpoint := flag.String("endpoint", "", "the emulator's JSON API endpoint (…/storage/v1/)")
	conns := flag.Int("connections", 32, "GETs in flight")
	flag.Parse()
	if flag.NArg() != 1 || *endpoint == "" {
		fmt.Fprintln(os.Stderr, "usage: bareget -endpoint URL [-connections N] gs://BUCKET/PREFIX")
		os.Exit(2)
	}
	if err := run(context.Background(), *endpoint, *conns, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "bareget:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoint string, conns int, uri string) error {
	u, err := object.ParsePrefix(uri)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	start, cpu0 := time.Now(), cpuTime()
	names, err := list(ctx, client, endpoint, u.Bucket, u.Path)
	if err != nil {
		return err
	}
	base := strings.TrimSuffix(strings.TrimSuffix(endpoint, "/"), "/storage/v1")
	var next, bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(names)); i = next.Add(1) - 1 {
				n, err := get(ctx, client, base+"/"+u.Bucket+"/"+names[i])
				if err != nil {
					errs <- err
					return
				}
				bytes.Add(n)
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("objects %d bytes %d seconds %.3f objects/s %.1f cpu-seconds %.3f\n",
		len(names), bytes.Load(), secs, float64(len(names))/secs, (cpuTime() - cpu0).Seconds())
	return nil
}

// list returns the names under prefix, page by page.
func list(ctx context.Context, client *http.Client, endpoint, bucket, prefix string) ([]string, error) {
	var names []string
	token := ""
	for {
		q := url.Values{"prefix": {prefix}, "fields": {"items(name),nextPageToken"}}
		if token != "" {
			q.Set("pageToken", token)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			strings.TrimSuffix(endpoint, "/")+"/b/"+url.PathEscape(bucket)+"/o?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			Items         []struct{ Name string }
			NextPageToken string
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("list: status %d: %v", resp.StatusCode, err)
		}
		for _, it := range page.Items {
			names = append(names, it.Name)
		}
		if token = page.NextPageToken; token == "" {
			return names, nil
		}
	}
}

// get GETs one object's media and discards it, returning its length.
func get(ctx context.Context, client *http.Client, u string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	return n, err
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
