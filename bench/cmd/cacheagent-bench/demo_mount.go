package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/mount"
)

// demoMount mounts the demo's cache read-only at mnt, reads want through
// the mount, checks it against the object's bytes and unmounts. It returns
// the line to print: what it read, or why FUSE was skipped (no FUSE here is
// not an error; different bytes are).
func demoMount(ctx context.Context, a *cli.Agent, mnt string, want fakestorage.Object) (line string, err error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Sprintf("mount: skipped: no FUSE here (%v)", err), nil
	}
	srv, err := mount.Mount(ctx, mnt, mount.Config{Cache: a.Cache, Source: a.Source,
		Roots: []mount.Root{{Bucket: demoBucket, Prefix: demoPrefix}}, Logger: slog.Default()})
	if err != nil {
		return fmt.Sprintf("mount: skipped: FUSE mount failed (%v)", err), nil
	}
	defer func() {
		uerr := srv.Unmount()
		if uerr == nil {
			srv.Wait()
		}
		err = errors.Join(err, uerr)
	}()
	p := filepath.Join(srv.Mountpoint(), want.BucketName, filepath.FromSlash(want.Name))
	got, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("demo: read through the mount: %w", err)
	}
	if !bytes.Equal(got, want.Content) {
		return "", fmt.Errorf("demo: %s read through the mount differs from gs://%s/%s (%d bytes, want %d)",
			p, want.BucketName, want.Name, len(got), len(want.Content))
	}
	return fmt.Sprintf("mount: read %s (%s) through a FUSE mount of the cache at %s (passthrough: %v): "+
		"identical to the GCS object", filepath.Join(want.BucketName, want.Name), humanize.IBytes(uint64(len(got))),
		srv.Mountpoint(), srv.Passthrough()), nil
}
