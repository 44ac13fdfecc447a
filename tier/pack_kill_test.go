package tier

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// killObjects is how many small objects TestPackedKilledMidGroup's child
// fills; killSize returns object i's size (20-80 KiB, not page multiples).
const killObjects = 600

func killSize(i int) int { return 20<<10 + (i*7919)%(60<<10) }

// TestPackedKilledMidGroup SIGKILLs a process that is packing objects into
// segments at a random moment, three times over the same cache: after each
// restart every object the index adopted reads back exactly as the source
// has it (nothing torn is served), Verify finds nothing corrupt, adopting
// downloads nothing, and what was lost is fetched again.
func TestPackedKilledMidGroup(t *testing.T) {
	if os.Getenv("TIER_PACK_CHILD_DIR") != "" {
		packChild(t)
		return
	}
	env := newDirEnv(t)
	for i := range killObjects {
		env.put(t, "bkt", fmt.Sprintf("k%04d", i), pattern(i, killSize(i)))
	}
	dir := t.TempDir()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPackedKilledMidGroup$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TIER_PACK_CHILD_DIR="+dir, "TIER_PACK_CHILD_SRC="+env.root)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill once the child has committed some objects, a random
		// moment later: groups are in flight then.
		sc := bufio.NewScanner(out)
		for sc.Scan() && sc.Text() != "filling" {
		}
		time.Sleep(time.Duration(5+rng.IntN(60)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		io.Copy(io.Discard, out)
		cmd.Wait()

		before := env.dl.calls.Load()
		c, err := Open(ctx, env.packConfig(dir, 1<<30))
		if err != nil {
			t.Fatal(err)
		}
		adopted := c.Stats().Base().Entries
		for _, e := range c.Entries("bkt", "") {
			var i int
			fmt.Sscanf(e.Attrs.Name, "k%04d", &i)
			openRead(t, c, e.Attrs.Object, pattern(i, killSize(i)), CachedOnly())
		}
		if n := env.dl.calls.Load() - before; n != 0 {
			t.Errorf("round %d: %d downloads while reading the %d adopted objects; want 0", round, n, adopted)
		}
		res, err := c.Verify(ctx, VerifyOptions{})
		if err != nil || res.Corrupt != 0 || res.Damaged != 0 {
			t.Errorf("round %d: Verify = %+v, %v; want nothing corrupt or damaged", round, res.Verify, err)
		}
		checkInvariants(t, c)
		t.Logf("round %d: %d of %d objects adopted after the kill", round, adopted, killObjects)
		// Half go again, so the next child has packing to do.
		for i := 0; i < killObjects; i += 2 {
			if _, err := c.Evict(ctx, "bkt", fmt.Sprintf("k%04d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Finally everything: what was lost is fetched again, all of it exact.
	c := openCache(t, env.packConfig(dir, 1<<30))
	for i := range killObjects {
		openRead(t, c, obj("bkt", fmt.Sprintf("k%04d", i)), pattern(i, killSize(i)))
	}
	checkInvariants(t, c)
	checkIndexMatchesFiles(t, c)
}

// packChild is the child of TestPackedKilledMidGroup: it opens the cache in
// $TIER_PACK_CHILD_DIR over the source in $TIER_PACK_CHILD_SRC, prefetches
// every object (the packed ones in groups) and says "filling" once the first
// object is committed. It is killed long before it would end.
func packChild(t *testing.T) {
	dir, root := os.Getenv("TIER_PACK_CHILD_DIR"), os.Getenv("TIER_PACK_CHILD_SRC")
	env := newDirEnv(t)
	src, err := fetch.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	env.src, env.dl = src, newDownloader(t, src)
	// Slow each download a little so that many groups are in flight.
	env.dl.before = func(ctx context.Context, a object.Attrs, u *object.Urgency) error {
		time.Sleep(time.Millisecond)
		return nil
	}
	c, err := Open(context.Background(), env.packConfig(dir, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	var as []object.Attrs
	for i := range killObjects {
		a, err := src.Stat(context.Background(), obj("bkt", fmt.Sprintf("k%04d", i)))
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, a)
	}
	said := false
	c.Prefetch(context.Background(), as, object.Warm, func(p Progress) {
		if !said && p.ObjectsDone-p.Cached > 0 {
			said = true
			fmt.Println("filling")
		}
	})
	fmt.Println("filling") // everything was cached already
	time.Sleep(time.Minute)
}
