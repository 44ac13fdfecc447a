package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/mount"
	"github.com/cacheagent/cacheagent/object"
)

// newMountCmd returns "cacheagent mount MOUNTPOINT gs://BUCKET[/PREFIX]...".
func newMountCmd(opts *cli.Options) *cobra.Command {
	var (
		listTTL     time.Duration
		allowOther  bool
		passthrough bool
		skipOpen    bool
		open        string
	)
	cmd := &cobra.Command{
		Use:   "mount MOUNTPOINT [gs://BUCKET[/PREFIX]...]",
		Short: "Serve cached objects as read-only files at MOUNTPOINT (FUSE, foreground)",
		Long: `mount shows the objects under each gs://BUCKET[/PREFIX] as read-only files at
MOUNTPOINT/BUCKET/<object name>; directories come from the '/' in the names. Opening
a file downloads it into the cache first if needed (one download however many
readers); reads then come from the cached copy, through FUSE passthrough where the
kernel allows it. Buckets are listed again when their listing is older than
--list-ttl. Object names that cannot be paths ("a//b", "../x", NUL, a segment over
255 bytes) are left out and logged once.

With no gs:// arguments the mount is dynamic, like gcsfuse's: MOUNTPOINT/BUCKET
shows any bucket that exists (checked at its first lookup, with one listing request);
listing MOUNTPOINT shows the buckets looked up so far, as it cannot list them all.

mount runs in the foreground until SIGINT or SIGTERM, then unmounts. If files are
still open it detaches the mount (the mountpoint is free at once) and serves them
until they are closed, or until a second signal. A stale mount left at MOUNTPOINT
by a crashed mount is cleared at start.`,
		Example: `  cacheagent mount /mnt/gcs gs://my-bucket/train/ gs://my-bucket/val/
  cacheagent mount /mnt/gcs    # dynamic: /mnt/gcs/<any bucket>/...
  python -c 'import numpy; print(numpy.load("/mnt/gcs/my-bucket/train/x.npy", mmap_mode="r").shape)'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			roots, err := parseRoots(args[1:])
			if err != nil {
				return err
			}
			om, err := mount.ParseOpenMode(open)
			if err != nil {
				return err
			}
			if skipOpen {
				if om == mount.OpenAsk {
					return fmt.Errorf("--skip-open contradicts --open %s", om)
				}
				om = mount.OpenSkip
			}
			ctx := cmd.Context()
			a, err := cli.OpenAgent(ctx, opts.Config())
			if err != nil {
				return err
			}
			defer a.Close()
			srv, err := mount.Mount(ctx, args[0], mount.Config{
				Cache:              a.Cache,
				Source:             a.Source,
				Roots:              roots,
				ListTTL:            listTTL,
				AllowOther:         allowOther,
				DisablePassthrough: !passthrough,
				Open:               om,
				Logger:             slog.Default(),
			})
			if err != nil {
				return err
			}
			what := strings.Join(args[1:], " ")
			if what == "" {
				what = "any bucket (dynamic)"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "cacheagent: serving %s at %s (passthrough: %v); SIGINT or SIGTERM unmounts\n",
				what, srv.Mountpoint(), srv.Passthrough())
			return serveMount(ctx, srv, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.DurationVar(&listTTL, "list-ttl", mount.DefaultListTTL, "list a bucket again when its listing is older than this (negative: never; 0: the default)")
	f.BoolVar(&allowOther, "allow-other", false, "let other users read the mount (root, or user_allow_other in /etc/fuse.conf)")
	f.BoolVar(&passthrough, "passthrough", true, "let the kernel read cached files itself (FUSE passthrough) where it can")
	f.StringVar(&open, "open", "auto", "whether the kernel asks to open each file: ask (passthrough where the kernel can), skip (many small files read ~2x faster; no passthrough, pages cached twice) or auto (decided at the first open: skip where files of at most 1 MiB hold 90% of the listed bytes)")
	f.BoolVar(&skipOpen, "skip-open", false, "same as --open skip")
	_ = f.MarkDeprecated("skip-open", "use --open skip") // fails only for an undefined flag
	return cmd
}

// parseRoots parses the gs:// arguments of mount.
func parseRoots(args []string) ([]mount.Root, error) {
	roots := make([]mount.Root, 0, len(args))
	for _, s := range args {
		u, err := object.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		roots = append(roots, mount.Root{Bucket: u.Bucket, Prefix: u.Path})
	}
	return roots, nil
}

// serveMount waits until ctx is cancelled (SIGINT or SIGTERM) or the mount
// is unmounted from outside; then it unmounts and waits for the server to
// end. A second signal stops waiting for open files: the process exits and
// their readers get errors.
func serveMount(ctx context.Context, srv *mount.Server, w io.Writer) error {
	select {
	case <-srv.Done():
		fmt.Fprintf(w, "cacheagent: %s was unmounted\n", srv.Mountpoint())
		return nil
	case <-ctx.Done():
	}
	again, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Unmount(); err != nil {
		return err
	}
	select {
	case <-srv.Done():
		fmt.Fprintf(w, "cacheagent: unmounted %s\n", srv.Mountpoint())
		return nil
	case <-again.Done():
		return fmt.Errorf("exiting with %d files still open on the detached mount %s", srv.Stats().OpenFiles, srv.Mountpoint())
	}
}
