// Package bare is the baseline of the small-object benchmarks: a client
// that lists a prefix and GETs every object on as many keep-alive
// connections, discarding the bytes, as a program reading a bucket without
// any cache would. It speaks plain HTTP to the emulator's JSON and media
// endpoints, with nothing between the socket and io.Discard.
package bare

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one Read did.
type Result struct {
	Objects int           // objects listed and read
	Bytes   int64         // bytes read
	Elapsed time.Duration // from the listing's first request to the last byte
}

// Read lists bucket/prefix through endpoint (the JSON API's base,
// http://HOST:PORT/storage/v1/) and GETs every object it lists on conns
// keep-alive connections, discarding the bytes.
func Read(ctx context.Context, endpoint string, conns int, bucket, prefix string) (Result, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	start := time.Now()
	names, err := List(ctx, client, endpoint, bucket, prefix)
	if err != nil {
		return Result{}, err
	}
	media := strings.TrimSuffix(strings.TrimSuffix(endpoint, "/"), "/storage/v1") + "/" + url.PathEscape(bucket) + "/"
	var next, bytes atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(names)); i = next.Add(1) - 1 {
				n, err := Get(ctx, client, media+strings.ReplaceAll(url.PathEscape(names[i]), "%2F", "/"))
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
		return Result{}, err
	default:
	}
	return Result{Objects: len(names), Bytes: bytes.Load(), Elapsed: time.Since(start)}, nil
}

// List returns the names under prefix in bucket, page by page, asking only
// for names.
func List(ctx context.Context, client *http.Client, endpoint, bucket, prefix string) ([]string, error) {
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
			return nil, fmt.Errorf("list gs://%s/%s: %w", bucket, prefix, err)
		}
		var page struct {
			Items         []struct{ Name string }
			NextPageToken string
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("list gs://%s/%s: status %d: %v", bucket, prefix, resp.StatusCode, err)
		}
		for _, it := range page.Items {
			names = append(names, it.Name)
		}
		if token = page.NextPageToken; token == "" {
			return names, nil
		}
	}
}

// Get GETs one object's media at u and discards it, returning its length.
func Get(ctx context.Context, client *http.Client, u string) (int64, error) {
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
