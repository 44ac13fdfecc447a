package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/checkpoint"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/daemon"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// newCheckpointCmd groups the checkpoint commands.
func newCheckpointCmd(opts *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Save checkpoints through the agent (a local write, uploaded behind training) and restore them",
		Long: `A checkpoint is a directory of files written by any framework (torch.save, DCP, safetensors).
save hands it to the agent: the files move into the cache (renamed, nothing copied on the cache's
filesystem), are uploaded to gs://BUCKET/PREFIX/ in the background with every object written only if
absent, and are committed by the manifest PREFIX/cacheagent-checkpoint.json, written last.
Through the daemon the upload goes on after save returns; standalone, save waits for the commit.`,
	}
	cmd.AddCommand(newCheckpointSaveCmd(opts), newCheckpointWaitCmd(opts), newCheckpointStatusCmd(opts),
		newCheckpointListCmd(opts), newCheckpointRestoreCmd(opts))
	return cmd
}

// newCheckpointSaveCmd is `cacheagent checkpoint save DIR gs://BUCKET/PREFIX/`.
func newCheckpointSaveCmd(opts *cli.Options) *cobra.Command {
	var wait string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "save DIR gs://BUCKET/PREFIX/ [--wait local|peers|gcs]",
		Short: "Save DIR's files as the checkpoint at a prefix; return once durable at --wait",
		Long: `save takes DIR's regular files (symlinks and special files are refused) as the checkpoint at
the prefix, which must not hold one already. It returns once the checkpoint is durable at --wait:
local (fsynced on this node, the default), peers (also on other fleet members) or gcs (committed).
DIR's files are moved, not copied: afterwards DIR holds only its emptied subdirectories.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			u, err := object.ParsePrefix(args[1])
			if err != nil {
				return err
			}
			var info stats.Checkpoint
			err = withCache(cmd, opts, func(c *control.Client) (err error) {
				info, err = saveThrough(cmd.Context(), c, dir, u.String(), wait)
				return err
			}, func(a *cli.Agent) error {
				return withStore(cmd.Context(), opts, a, func(s *daemon.CheckpointStore) (err error) {
					if info, err = s.Save(cmd.Context(), dir, u, checkpoint.SaveOptions{}); err != nil {
						return err
					}
					// Standalone, nothing uploads after this process: wait for the commit.
					info, err = s.Wait(cmd.Context(), u, checkpoint.GCS)
					return err
				})
			})
			if err != nil {
				return fmt.Errorf("checkpoint save: %w", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), info)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d files, %s, %s\n", info.URI, info.Files,
				humanize.IBytes(uint64(info.Bytes)), info.State)
			return nil
		},
	}
	cmd.Flags().StringVar(&wait, "wait", checkpoint.Local, "durability to wait for: local, peers or gcs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checkpoint's state as JSON")
	return cmd
}

// saveThrough saves dir through the daemon: this process, with its user's
// permissions, moves the files into a staging directory the daemon gives
// (the daemon may not see dir, nor be allowed to change it), and puts them
// back if the daemon refuses the save.
func saveThrough(ctx context.Context, c *control.Client, dir, uri, wait string) (stats.Checkpoint, error) {
	staging, err := c.CheckpointStaging(ctx)
	if err != nil {
		return stats.Checkpoint{}, err
	}
	undo, err := checkpoint.Stage(dir, staging)
	if err != nil {
		os.RemoveAll(staging)
		c.RemoveStaging(ctx, staging)
		return stats.Checkpoint{}, err
	}
	info, err := c.SaveCheckpoint(ctx, staging, uri, wait)
	if _, serr := os.Stat(staging); err != nil && serr == nil {
		// Refused: the daemon put the files back in staging (a save it
		// took, failing only to reach wait, removed the directory).
		if uerr := undo(); uerr != nil {
			return info, errors.Join(err, uerr)
		}
		os.RemoveAll(staging)
		c.RemoveStaging(ctx, staging) // its top is the daemon's
	}
	return info, err
}

// restoreThrough restores the checkpoint at uri into dir through the
// daemon: into a fresh directory it gives, from which this process moves
// the files (with its user's permissions) into dir.
func restoreThrough(ctx context.Context, c *control.Client, uri, dir string) (stats.Restore, error) {
	res, err := c.RestoreCheckpoint(ctx, uri, "")
	if err != nil {
		return res, err
	}
	copied, err := checkpoint.Place(res.Dir, dir)
	os.RemoveAll(res.Dir)         // what a refused placement left
	c.RemoveStaging(ctx, res.Dir) // its top is the daemon's
	res.Dir = dir
	res.Linked = max(res.Linked-copied, 0)
	return res, err
}

// withStore opens the standalone checkpoint store over a and runs f.
func withStore(ctx context.Context, opts *cli.Options, a *cli.Agent, f func(*daemon.CheckpointStore) error) error {
	s, err := daemon.OpenCheckpointStore(ctx, opts.Config(), a.Cache, slog.Default())
	if err != nil {
		return err
	}
	return errors.Join(f(s), s.Close())
}

// needDaemon runs f through the daemon; without one it says what to do.
func needDaemon(cmd *cobra.Command, opts *cli.Options, what string, f func(*control.Client) error) error {
	c, err := dialDaemon(cmd, opts)
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("%s needs the daemon (cacheagent serve), which holds the saves: none answers on %s",
			what, opts.Config().Control.Socket)
	}
	defer c.Close()
	return f(c)
}

// newCheckpointWaitCmd is `cacheagent checkpoint wait gs://BUCKET/PREFIX/`.
func newCheckpointWaitCmd(opts *cli.Options) *cobra.Command {
	var durability string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait gs://BUCKET/PREFIX/ [--durability peers|gcs] [--timeout DURATION]",
		Short: "Wait until a save is durable (default: committed to GCS)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := object.ParsePrefix(args[0])
			if err != nil {
				return err
			}
			return needDaemon(cmd, opts, "checkpoint wait", func(c *control.Client) error {
				info, err := c.WaitCheckpoint(cmd.Context(), u.String(), durability, timeout)
				if err != nil {
					return fmt.Errorf("checkpoint wait: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", info.URI, info.State)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&durability, "durability", checkpoint.GCS, "durability to wait for: local, peers or gcs")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (default: wait as long as it takes)")
	return cmd
}

// newCheckpointStatusCmd is `cacheagent checkpoint status [gs://BUCKET/PREFIX/]`.
func newCheckpointStatusCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [gs://BUCKET/PREFIX/]",
		Short: "Show the checkpoints this node saved (and the replicas it holds), newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			uri := ""
			if len(args) == 1 {
				u, err := object.ParsePrefix(args[0])
				if err != nil {
					return err
				}
				uri = u.String()
			}
			return needDaemon(cmd, opts, "checkpoint status", func(c *control.Client) error {
				st, err := c.CheckpointStatus(cmd.Context(), uri)
				if err != nil {
					return err
				}
				if asJSON {
					return cli.WriteJSON(cmd.OutOrStdout(), st)
				}
				return printCheckpoints(cmd.OutOrStdout(), st.Checkpoints, true)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"checkpoints":[{"uri","files","bytes","state","uploaded_bytes","replicas"}]}`)
	return cmd
}

// newCheckpointListCmd is `cacheagent checkpoint list gs://BUCKET/RUN/`.
func newCheckpointListCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list gs://BUCKET/RUN/",
		Short: "List the committed checkpoints under a run, newest first",
		Long: `list reads the manifests under the run's prefix and shows the checkpoints whose objects match
their manifest, newest first; others are reported and left out.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := object.ParsePrefix(args[0])
			if err != nil {
				return err
			}
			var out control.Checkpoints
			err = withGCS(cmd, opts, func(c *control.Client) (err error) {
				out, err = c.ListCheckpoints(cmd.Context(), run.String())
				return err
			}, func(src object.Source) error {
				l, skipped, err := checkpoint.List(cmd.Context(), src, run)
				out.Checkpoints = l
				for _, e := range skipped {
					out.Skipped = append(out.Skipped, e.Error())
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("checkpoint list: %w", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), out)
			}
			for _, s := range out.Skipped {
				fmt.Fprintln(cmd.ErrOrStderr(), "skipped:", s)
			}
			return printCheckpoints(cmd.OutOrStdout(), out.Checkpoints, false)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// newCheckpointRestoreCmd is `cacheagent checkpoint restore gs://BUCKET/PREFIX/ DIR`.
func newCheckpointRestoreCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "restore gs://BUCKET/PREFIX/ DIR",
		Short: "Place a committed checkpoint's files in DIR, verified (hard links from the cache where it can)",
		Long: `restore reads the checkpoint's manifest, checks that its objects match it, reads each file
through the cache (in fleet mode from the members that hold it: a cluster restoring at once reads the
checkpoint from GCS about once) and places it in DIR: a hard link to the cache's copy on the same
filesystem (the cache's copy itself: do not change it in place), else a copy whose CRC32C is checked.
Nothing in DIR is overwritten.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := object.ParsePrefix(args[0])
			if err != nil {
				return err
			}
			dir, err := filepath.Abs(args[1])
			if err != nil {
				return err
			}
			var res stats.Restore
			err = withCache(cmd, opts, func(c *control.Client) (err error) {
				res, err = restoreThrough(cmd.Context(), c, u.String(), dir)
				return err
			}, func(a *cli.Agent) error {
				return withStore(cmd.Context(), opts, a, func(s *daemon.CheckpointStore) (err error) {
					res, err = s.Restore(cmd.Context(), u, dir, nil)
					return err
				})
			})
			if err != nil {
				return fmt.Errorf("checkpoint restore: %w", err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d files, %s (%d hard-linked from the cache)\n", res.Dir, res.Files,
				humanize.IBytes(uint64(res.Bytes)), res.Linked)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// withGCS runs remote through the daemon when one answers, else local on
// a GCS source of its own (no cache needed).
func withGCS(cmd *cobra.Command, opts *cli.Options, remote func(*control.Client) error, local func(object.Source) error) error {
	c, err := dialDaemon(cmd, opts)
	if err != nil {
		return err
	}
	if c != nil {
		defer c.Close()
		return remote(c)
	}
	src, err := fetch.NewGCS(cmd.Context(), opts.Config().Fetch.GCS())
	if err != nil {
		return err
	}
	defer src.Close()
	return local(src)
}

// printCheckpoints prints checkpoints as a table.
func printCheckpoints(w io.Writer, cs []stats.Checkpoint, progress bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if progress {
		fmt.Fprintln(tw, "URI\tSTATE\tFILES\tSIZE\tUPLOADED\tREPLICAS\tSAVED\tERROR")
	} else {
		fmt.Fprintln(tw, "URI\tFILES\tSIZE\tNODE\tSAVED")
	}
	for _, c := range cs {
		if progress {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", c.URI, c.State, c.Files, humanize.IBytes(uint64(c.Bytes)),
				humanize.IBytes(uint64(c.UploadedBytes)), c.Replicas, c.Created.Local().Format(time.DateTime), c.Error)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", c.URI, c.Files, humanize.IBytes(uint64(c.Bytes)), c.Node,
				c.Created.Local().Format(time.DateTime))
		}
	}
	return tw.Flush()
}
