package peer_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// agent is one node's data plane, wired as a daemon would wire it.
type agent struct {
	src   *peer.Source
	cache *tier.Cache
	http  *http.Server
}

// startAgent wires a node: a peer Source over GCS, two Downloaders (peer
// reads, and origin reads for owned objects and peers' misses), the tier
// over them, and the Server on ln.
func startAgent(gcs object.Source, owners peer.Owners, key []byte, dir string, ln net.Listener, wg *sync.WaitGroup) (*agent, error) {
	src, err := peer.New(gcs, peer.Config{Key: key, Owners: owners})
	if err != nil {
		return nil, err
	}
	local, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		return nil, err
	}
	owner, err := fetch.NewDownloader(src, fetch.Config{})
	if err != nil {
		return nil, err
	}
	dl, err := peer.NewDownloader(src, local, owner)
	if err != nil {
		return nil, err
	}
	c, err := tier.Open(context.Background(), tier.Config{Dir: dir, Source: src, Downloader: dl})
	if err != nil {
		return nil, err
	}
	srv, err := peer.NewServer(peer.ServerConfig{Key: key, Cache: c, Buckets: []string{"data"}, Forwarding: src})
	if err != nil {
		c.Close()
		return nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() { hs.Serve(ln) })
	return &agent{src: src, cache: c, http: hs}, nil
}

// Two agents share one cache: node "b" owns every object here, so "a"
// reads it from "b", and "b" reads it from GCS once.
func Example() {
	emu, err := emulator.Start(emulator.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer emu.Close()
	gen, err := emu.Put("data", "shard-0", emulator.Pattern(1, 1000))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	gcs, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		log.Fatal(err)
	}
	defer gcs.Close()
	tmp, err := os.MkdirTemp("", "peer-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)

	lns := map[string]net.Listener{}
	addrs := map[string]string{}
	for _, name := range []string{"a", "b"} {
		if lns[name], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			log.Fatal(err)
		}
		addrs[name] = lns[name].Addr().String()
	}
	table, err := placement.New([]placement.Member{{Name: "b", Weight: 1}}) // "a" stores nothing for others
	if err != nil {
		log.Fatal(err)
	}
	key := []byte("a shared key of at least 16 bytes")
	var wg sync.WaitGroup
	agents := map[string]*agent{}
	for _, name := range []string{"a", "b"} {
		a, err := startAgent(gcs, peer.TableOwners(table, name, addrs, 2), key, tmp+"/"+name, lns[name], &wg)
		if err != nil {
			log.Fatal(err)
		}
		agents[name] = a
	}
	defer func() {
		for _, a := range agents {
			a.http.Close()
			a.cache.Close()
			a.src.Close()
		}
		wg.Wait()
	}()

	h, err := agents["a"].cache.Open(ctx, object.Object{Bucket: "data", Name: "shard-0", Generation: gen})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	fmt.Println("a read", h.Size(), "bytes:", agents["a"].src.Stats().PeerBytes["b"], "from b")
	fmt.Println("b read", agents["b"].src.Stats().OriginBytes, "bytes from GCS")
	// Output:
	// a read 1000 bytes: 1000 from b
	// b read 1000 bytes from GCS
}
