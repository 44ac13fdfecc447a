// Command firsttouch measures what the machine charges for the page cache
// a cache's fills take: it writes rounds of objects (100 KiB pwrites from
// one buffer, as a packed fill writes) into new files under a directory,
// keeping every file until the end, and prints each round's CPU and wall
// time per pwrite. While the kernel hands out memory it freed recently,
// a round costs what copying into the page cache costs; on a VM whose host
// backs guest memory lazily and takes freed memory back (Firecracker's free
// page reporting), rounds past what was recently freed touch pages the host
// must fault in first, and cost several times more. A cloud VM whose
// memory stays backed shows the same figure every round.
//
//	go run ./bench/cmd/firsttouch -dir /var/tmp -rounds 12 -mib 200
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cacheagent/cacheagent/internal/cputime"
)

func main() {
	dir := flag.String("dir", os.TempDir(), "where to write (a disk-backed filesystem, not tmpfs)")
	rounds := flag.Int("rounds", 12, "rounds of writes, each into a new file kept until the end")
	mib := flag.Int("mib", 200, "MiB written per round")
	size := flag.Int("size", 100<<10, "bytes per pwrite (one object)")
	flag.Parse()
	if *rounds < 1 || *mib < 1 || *size < 1 {
		fmt.Fprintln(os.Stderr, "firsttouch: -rounds, -mib and -size must be positive")
		os.Exit(2)
	}
	if err := run(*dir, *rounds, *mib<<20, *size); err != nil {
		fmt.Fprintln(os.Stderr, "firsttouch:", err)
		os.Exit(1)
	}
}

func run(dir string, rounds, perRound, size int) (err error) {
	tmp, err := os.MkdirTemp(dir, "firsttouch-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	n := max(perRound/size, 1)
	fmt.Printf("round  MiB-so-far  cpu-µs/pwrite  wall-µs/pwrite  (%d pwrites of %d bytes a round)\n", n, size)
	for r := range rounds {
		f, err := os.Create(filepath.Join(tmp, fmt.Sprintf("round-%03d", r)))
		if err != nil {
			return err
		}
		cpu0, t0 := cputime.Self(), time.Now()
		for i := range n {
			if _, err := f.WriteAt(buf, int64(i)*int64(size)); err != nil {
				f.Close()
				return err
			}
		}
		cpu, wall := cputime.Self()-cpu0, time.Since(t0)
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Printf("%5d  %10d  %13.1f  %14.1f\n", r, (r+1)*n*size>>20,
			float64(cpu.Microseconds())/float64(n), float64(wall.Microseconds())/float64(n))
	}
	return nil
}
