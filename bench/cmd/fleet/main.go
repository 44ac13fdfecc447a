// Command fleet measures fleet mode on one machine with the fleettest
// harness (network namespaces, one counting gcsproxy per node, tc caps):
// the figures of issue 18's "Performance" section as counts and ratios.
// It needs root; bench/fleet.sh builds the binaries and runs it.
//
//	fleet -bin DIR [-nodes 3] [-objects 48] [-size 2MiB] [-gcs-mbit 40] [-peer-mbit 160] [-phases 12345678]
//
// An epoch is every node reading every object of the dataset once
// (`cacheagent cat` through its daemon, -readers at a time per node, each
// node in its own order), all nodes at once. Phases:
//
//  1. one node alone, no fleet section, on the same shaped GCS link: cold
//     epoch time (today's figure);
//  2. N nodes, fleet, ample budget (2·D each): epoch 1 cold (GCS bytes vs
//     D and N·D, time per node vs phase 1), epoch 2 warm (GCS bytes vs
//     0.01·D);
//  3. N nodes, fleet, disk budget B = D/2.5 each (so D = 2.5·B, N·B ≥ D):
//     epoch 1 cold, then is every object cached somewhere, then epochs 2
//     and 3 (GCS bytes vs 0.01·D); each node's disk use sampled every
//     100 ms against B;
//  4. N nodes, fleet, ample budget: a cold epoch with node N SIGKILLed at
//     half the link-bound estimate: survivors' epoch time, their slowest
//     single read (the stall), extra GCS bytes, corrupt bytes;
//  5. one node with a fleet section against the same node without one
//     (solo.go): cold and warm epoch times, alternated;
//  6. rank-aware loading (rankaware.go): one loader session per node with
//     the node shuffle over an .npy dataset, peer and GCS bytes per epoch;
//  7. the hot spot (hotspot.go): one object cached by its owner, read by
//     every node at once: time against its size over the peer rate, and
//     the busiest server's bytes against the mean;
//  8. checkpoints (checkpoint.go): a save with --wait peers against C over
//     the peer rate, restores on all nodes at once against each node
//     restoring from GCS alone, and the saver SIGKILLed after its replica.
//
// Every byte read is compared with the emulator's content (phase 6: each
// sample's rows with its id; phase 7: `cacheagent verify`).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/fleettest"
)

type opts struct {
	bin               string
	nodes, objects    int
	size              int64
	gcsMbit, peerMbit int
	firstByte         time.Duration
	readers           int
	connections       int
	peerBatch         bool // fleet.peer_batch
	emuFiles          bool // gcsemu -dir
	reader            string
	phases            string
	// Phase 5: the dataset's objects (of -size), the rounds of
	// without/with a fleet section, the warm epochs of each.
	soloObjects, soloRounds, soloWarm int
	// Phase 6: the .npy dataset (shards of rows rows of rowBytes), the
	// epochs each node's loader reads, its shuffle mode, and each node's
	// disk budget as a share of the dataset.
	shards, rows, rowBytes, loaderEpochs int
	loaderShuffle                        string
	loaderBudget                         float64
	// Phase 7: the hot object's size and the GCS rate while it is warmed.
	hotSize    int64
	hotGCSMbit int
	// Phase 8: the checkpoint's size.
	ckptSize int64
}

func main() {
	var o opts
	var size string
	flag.StringVar(&o.bin, "bin", "", "directory with cacheagent, gcsemu and gcsproxy (required)")
	flag.IntVar(&o.nodes, "nodes", 3, "fleet size N")
	flag.IntVar(&o.objects, "objects", 48, "objects in the dataset")
	flag.StringVar(&size, "size", "2MiB", "size of each object")
	flag.IntVar(&o.gcsMbit, "gcs-mbit", 40, "per-node GCS link rate r_g, Mbit/s (htb in the hub)")
	flag.IntVar(&o.peerMbit, "peer-mbit", 160, "per-node peer link rate r_p, Mbit/s each way (htb)")
	flag.DurationVar(&o.firstByte, "first-byte", 20*time.Millisecond, "GCS time to first byte (gcsproxy)")
	flag.IntVar(&o.readers, "readers", 4, "concurrent reads per node")
	flag.BoolVar(&o.emuFiles, "emu-files", true, "keep gcsemu's objects in files (each request O(1); in memory each costs O(objects))")
	flag.BoolVar(&o.peerBatch, "peer-batch", true, "fleet.peer_batch: small objects from one owner in batch requests")
	flag.IntVar(&o.connections, "connections", 16, "each daemon's fetch.connections (the product's default is 64; 16 keeps the figures comparable with earlier runs)")
	flag.StringVar(&o.reader, "reader", "cat", "how phases 1-4 read an epoch: cat (one `cacheagent cat` process per object, -readers at a time, contents compared) or prefetch (one `prefetch --wait` job per node, inside the daemon, then verify)")
	flag.StringVar(&o.phases, "phases", "1234567", "phases to run (digits)")
	flag.IntVar(&o.soloObjects, "solo-objects", 24, "phase 5: objects (of -size) in the dataset")
	flag.IntVar(&o.soloRounds, "solo-rounds", 3, "phase 5: rounds of (without, with) a fleet section")
	flag.IntVar(&o.soloWarm, "solo-warm", 9, "phase 5: warm epochs after each cold one")
	flag.IntVar(&o.shards, "shards", 24, "phase 6: .npy shards (an x and a y file each)")
	flag.IntVar(&o.rows, "rows", 2048, "phase 6: rows per shard")
	flag.IntVar(&o.rowBytes, "row-bytes", 1024, "phase 6: bytes of each x row")
	flag.IntVar(&o.loaderEpochs, "loader-epochs", 3, "phase 6: epochs each node's loader reads")
	flag.StringVar(&o.loaderShuffle, "loader-shuffle", "node", "phase 6: the loaders' shuffle mode (node; shard-window to compare)")
	flag.Float64Var(&o.loaderBudget, "loader-budget", 2, "phase 6: each node's disk budget, as a share of the dataset")
	var hot string
	flag.StringVar(&hot, "hot-size", "256MiB", "phase 7: size of the hot object")
	flag.IntVar(&o.hotGCSMbit, "hot-gcs-mbit", 0, "phase 7: GCS link rate while the owner warms the hot object (0: uncapped)")
	var ckpt string
	flag.StringVar(&ckpt, "ckpt-size", "1GiB", "phase 8: size of the checkpoint")
	flag.Parse()
	n, err := humanize.ParseBytes(size)
	hn, herr := humanize.ParseBytes(hot)
	cn, cerr := humanize.ParseBytes(ckpt)
	if err != nil || herr != nil || cerr != nil || o.bin == "" {
		fmt.Fprintln(os.Stderr, "fleet: -bin is required and -size, -hot-size and -ckpt-size must be sizes")
		os.Exit(2)
	}
	o.size, o.hotSize, o.ckptSize = int64(n), int64(hn), int64(cn)
	if o.reader != "cat" && o.reader != "prefetch" {
		fmt.Fprintf(os.Stderr, "fleet: -reader %q: want cat or prefetch\n", o.reader)
		os.Exit(2)
	}
	if err := fleettest.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// content is object i's bytes (gcsemu's pattern).
func (o opts) content(i int) []byte { return emulator.Pattern(uint64(i)+1, int(o.size)) }

// cfg is the harness configuration of a fleet of nodes reading o's
// dataset with disk budget diskMax each.
func (o opts) cfg(nodes int, diskMax int64, noFleet bool) fleettest.Config {
	return fleettest.Config{Nodes: nodes, Bin: o.bin, Bucket: "bench", Prefix: "data/", Objects: o.objects,
		Size: o.size, FirstByte: o.firstByte, Rate: "0", GCSMbit: o.gcsMbit, PeerMbit: o.peerMbit,
		DiskMax: fmt.Sprint(diskMax), NoFleet: noFleet, Connections: o.connections, NoPeerBatch: !o.peerBatch,
		EmuFiles: o.emuFiles, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
}

// startAlive starts a harness with cfg and waits until every member is
// alive; the caller closes it.
func startAlive(ctx context.Context, cfg fleettest.Config) (*fleettest.Harness, error) {
	h, err := start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := h.WaitAlive(ctx, 30*time.Second); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// start starts a harness with cfg, closing it when Start fails.
func start(ctx context.Context, cfg fleettest.Config) (*fleettest.Harness, error) {
	h, err := fleettest.Start(ctx, cfg)
	if err != nil {
		if h != nil {
			h.Close()
		}
		return nil, err
	}
	return h, nil
}

// epoch is one node's read of the whole dataset.
type epoch struct {
	took    time.Duration
	slowest time.Duration // slowest single read
	median  time.Duration
	errors  int
	corrupt int64 // bytes differing from the content
	firstEr string
	slow    []string // reads over 2 s: start offset, duration, object
}

// readAll has each of nodes read every object once, readers at a time,
// all nodes at once; node k reads in its own shuffled order.
func readAll(ctx context.Context, o opts, h *fleettest.Harness, nodes []*fleettest.Node, seed uint64) []epoch {
	if o.reader == "prefetch" {
		return prefetchAll(ctx, h, nodes)
	}
	out := make([]epoch, len(nodes))
	var wg sync.WaitGroup
	for k, n := range nodes {
		wg.Go(func() {
			order := rand.New(rand.NewPCG(seed, uint64(k))).Perm(o.objects)
			var next atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			e := &out[k]
			t0 := time.Now()
			var rw sync.WaitGroup
			for range o.readers {
				rw.Go(func() {
					for {
						j := int(next.Add(1)) - 1
						if j >= len(order) {
							return
						}
						i := order[j]
						s := time.Now()
						got, err := n.Cat(ctx, h.ObjectName(i))
						d := time.Since(s)
						mu.Lock()
						lat = append(lat, d)
						if d > 2*time.Second {
							e.slow = append(e.slow, fmt.Sprintf("%s at +%.1fs took %.1fs", h.ObjectName(i), s.Sub(t0).Seconds(), d.Seconds()))
						}
						if err != nil {
							e.errors++
							if e.firstEr == "" {
								e.firstEr = err.Error()
							}
						} else if c := diff(got, o.content(i)); c != 0 {
							e.corrupt += c
						}
						mu.Unlock()
					}
				})
			}
			rw.Wait()
			e.took = time.Since(t0)
			sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
			if len(lat) > 0 {
				e.slowest, e.median = lat[len(lat)-1], lat[len(lat)/2]
			}
		})
	}
	wg.Wait()
	return out
}

func run(ctx context.Context, o opts) error {
	D := int64(o.objects) * o.size
	N := o.nodes
	report("# fleet benchmark %s", time.Now().UTC().Format(time.RFC3339))
	report("machine: nproc %d (%s); N=%d, D=%d objects × %s = %s; r_g=%d Mbit/s per node (hub htb), r_p=%d Mbit/s per node each way (htb), GCS first byte %v; %d concurrent reads per node; fetch.connections %d; fleet.peer_batch %v",
		runtime.NumCPU(), cpuModel(), N, o.objects, humanize.IBytes(uint64(o.size)), mib(D), o.gcsMbit, o.peerMbit, o.firstByte, o.readers, o.connections, o.peerBatch)
	rg, rp := float64(o.gcsMbit), float64(o.peerMbit)
	ideal := 1 / max(1/float64(N), float64(N-1)*rg/(float64(N)*rp))
	report("link-bound ideal speed-up over one node: 1/max(1/N, (N-1)·r_g/(N·r_p)) = %.2f×", ideal)

	// Phase 1: one node alone.
	var alone float64
	if strings.Contains(o.phases, "1") {
		h, err := fleettest.Start(ctx, o.cfg(1, 2*D, true))
		if err != nil {
			if h != nil {
				h.Close()
			}
			return fmt.Errorf("phase 1: %w", err)
		}
		es := readAll(ctx, o, h, h.Nodes, 1)
		g, _, _ := h.GCSBytes(ctx)
		errs, corrupt, first := problems(es)
		h.Close()
		alone = es[0].took.Seconds()
		report("\n## 1. one node alone, no fleet: cold epoch %.2fs, GCS bytes %s (%.3f·D), %d read errors %s, %d corrupt bytes",
			alone, mib(g), float64(g)/float64(D), errs, first, corrupt)
	}

	// Phase 2: the fleet with an ample budget.
	if strings.Contains(o.phases, "2") {
		h, err := fleettest.Start(ctx, o.cfg(N, 2*D, false))
		if err != nil {
			if h != nil {
				h.Close()
			}
			return fmt.Errorf("phase 2: %w", err)
		}
		defer h.Close()
		if err := h.WaitAlive(ctx, 30*time.Second); err != nil {
			return err
		}
		report("\n## 2. %d nodes, fleet, ample disk budget (2·D each)", N)
		es := readAll(ctx, o, h, h.Nodes, 1)
		g1, per, _ := h.GCSBytes(ctx)
		errs, corrupt, first := problems(es)
		report("epoch 1 (cold): GCS bytes %s = %.3f·D (target ≤ 1.05·D; without the fleet N·D = %s); per proxy %v",
			mib(g1), float64(g1)/float64(D), mib(int64(N)*D), mibs(per))
		report("epoch 1 times per node: %s (mean %.2fs); read errors %d %s; corrupt bytes %d", times(es), meanTook(es), errs, first, corrupt)
		if alone > 0 {
			sp := alone / meanTook(es)
			report("cold speed-up vs one node alone: %.2f× (ideal %.2f×, target ≥ 0.8·ideal = %.2f×): %.2f of the ideal",
				sp, ideal, 0.8*ideal, sp/ideal)
		}
		for k, e := range es {
			report("  %s: median read %.0f ms, slowest %.0f ms; reads over 2 s: %v", h.Nodes[k].Name,
				float64(e.median.Microseconds())/1000, float64(e.slowest.Microseconds())/1000, e.slow)
		}
		traffic(ctx, h)
		es = readAll(ctx, o, h, h.Nodes, 2)
		g2, _, _ := h.GCSBytes(ctx)
		errs, corrupt, first = problems(es)
		report("epoch 2 (warm, B ≥ D): GCS bytes %s = %.4f·D (target ≤ 0.01·D); times %s; read errors %d %s; corrupt bytes %d",
			mib(g2-g1), float64(g2-g1)/float64(D), times(es), errs, first, corrupt)
		h.Close()
	}

	// Phase 3: the fleet with B = D/2.5.
	B := D * 2 / 5
	if strings.Contains(o.phases, "3") {
		h, err := fleettest.Start(ctx, o.cfg(N, B, false))
		if err != nil {
			if h != nil {
				h.Close()
			}
			return fmt.Errorf("phase 3: %w", err)
		}
		defer h.Close()
		if err := h.WaitAlive(ctx, 30*time.Second); err != nil {
			return err
		}
		report("\n## 3. %d nodes, fleet, disk budget B = %s each (D = 2.5·B, N·B = %.1f·D)", N, mib(B), float64(N)*float64(B)/float64(D))
		s := sample(ctx, h.Nodes)
		g0, _, _ := h.GCSBytes(ctx)
		es := readAll(ctx, o, h, h.Nodes, 1)
		g1, per, _ := h.GCSBytes(ctx)
		errs, corrupt, first := problems(es)
		report("epoch 1 (cold): GCS bytes %s = %.3f·D (target ≤ 1.05·D; without the fleet N·D = %s); per proxy %v",
			mib(g1-g0), float64(g1-g0)/float64(D), mib(int64(N)*D), mibs(per))
		report("epoch 1 times per node: %s (mean %.2fs); read errors %d %s; corrupt bytes %d", times(es), meanTook(es), errs, first, corrupt)
		traffic(ctx, h)
		// Is everything cached somewhere?
		where := map[string]int{}
		for _, n := range h.Nodes {
			names, err := n.Cached(ctx)
			if err != nil {
				return err
			}
			for _, nm := range names {
				where[nm]++
			}
			u, _ := n.DiskUsed(ctx)
			report("  %s after epoch 1: %d objects cached, disk %s of B %s", n.Name, len(names), mib(u), mib(B))
		}
		missing := 0
		for i := range o.objects {
			if where[h.ObjectName(i)] == 0 {
				missing++
			}
		}
		report("after epoch 1: %d of %d objects cached on no node (target 0)", missing, o.objects)
		for ep := 2; ep <= 3; ep++ {
			a, _, _ := h.GCSBytes(ctx)
			es := readAll(ctx, o, h, h.Nodes, uint64(ep))
			b, _, _ := h.GCSBytes(ctx)
			errs, corrupt, first := problems(es)
			report("epoch %d: GCS bytes %s = %.3f·D (target ≤ 0.01·D); times %s; read errors %d %s; corrupt bytes %d",
				ep, mib(b-a), float64(b-a)/float64(D), times(es), errs, first, corrupt)
		}
		mx := s.end()
		var over []string
		for k, m := range mx {
			if m > B {
				over = append(over, h.Nodes[k].Name)
			}
		}
		report("highest disk use per node (sampled every 100 ms): %v vs B %s; nodes above B: %v", mibs(mx), mib(B), over)
		h.Close()
	}

	// Phase 4: SIGKILL one node mid-epoch.
	if strings.Contains(o.phases, "4") {
		h, err := fleettest.Start(ctx, o.cfg(N, 2*D, false))
		if err != nil {
			if h != nil {
				h.Close()
			}
			return fmt.Errorf("phase 4: %w", err)
		}
		defer h.Close()
		if err := h.WaitAlive(ctx, 30*time.Second); err != nil {
			return err
		}
		// Reference: an undisturbed cold epoch on a fleet like this one
		// would take about phase 2's epoch 1; kill at half of a first
		// guess from the link rates.
		victim := h.Nodes[N-1]
		survivors := h.Nodes[:N-1]
		owned, err := ownedBytes(ctx, h, h.Nodes[0])
		if err != nil {
			return fmt.Errorf("phase 4: who owns what: %w", err)
		}
		est := time.Duration(float64(D) / (rg * 1e6 / 8) / ideal * float64(time.Second))
		killAt := est / 2
		go func() {
			time.Sleep(killAt)
			victim.Kill()
		}()
		es := readAll(ctx, o, h, h.Nodes, 7)
		g, per, _ := h.GCSBytes(ctx)
		errs, corrupt, first := problems(es[:N-1])
		report("\n## 4. %d nodes, ample budget, %s SIGKILLed %.2fs into a cold epoch (half the link-bound estimate %.2fs)",
			N, victim.Name, killAt.Seconds(), est.Seconds())
		var worst time.Duration
		for k, e := range es[:N-1] {
			report("  survivor %s: epoch %.2fs, median read %.0f ms, slowest read %.0f ms; reads over 2 s: %v", survivors[k].Name, e.took.Seconds(),
				float64(e.median.Microseconds())/1000, float64(e.slowest.Microseconds())/1000, e.slow)
			worst = max(worst, e.slowest)
		}
		report("survivors' worst single read (the stall bound; target ≤ 2 s for a refused peer): %.2fs; read errors %d %s; corrupt bytes %d (target 0)",
			worst.Seconds(), errs, first, corrupt)
		// The dead node's share that the survivors had not read from it
		// when it died must now come from GCS (or from each other).
		var got int64
		for _, n := range survivors {
			if fs, err := n.Fleet(ctx); err == nil {
				got = max(got, fs.Traffic.PeerBytes[victim.Name])
			}
		}
		unread := owned[victim.Name] - got
		report("GCS bytes %s = %.3f·D: extra %s = %.3f·D (target ≤ the dead node's unread share: it owned %s, had read %s of it from GCS, and a survivor had received at most %s of it: %s = %.3f·D unread)",
			mib(g), float64(g)/float64(D), mib(g-D), float64(g-D)/float64(D), mib(owned[victim.Name]), mib(per[N-1]), mib(got),
			mib(unread), float64(unread)/float64(D))
		for _, n := range survivors {
			if fs, err := n.Fleet(ctx); err == nil {
				t := fs.Traffic
				report("  %s: origin %s, from peers %v, peer errors %v, fallbacks %d (%d waited for the rate limit)", n.Name, mib(t.OriginBytes),
					mibMap(t.PeerBytes), nonzero(t.PeerErrors), t.Fallbacks, t.FallbackWaits)
			}
		}
		h.Close()
	}
	for _, p := range []struct {
		digit string
		run   func(context.Context, opts) error
	}{{"5", solo}, {"6", rankAware}, {"7", hotSpot}, {"8", checkpoints}} {
		if strings.Contains(o.phases, p.digit) {
			if err := p.run(ctx, o); err != nil {
				return fmt.Errorf("phase %s: %w", p.digit, err)
			}
		}
	}
	return nil
}
