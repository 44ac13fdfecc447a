package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
)

func newFleetCmd(opts *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Show the fleet this node's daemon belongs to (fleet mode)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newFleetStatusCmd(opts))
	return cmd
}

func newFleetStatusCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the fleet's members: addresses, state, weight and owned share",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := dialDaemon(cmd, opts)
			if err != nil {
				return err
			}
			if c == nil {
				if opts.Config().Fleet == nil {
					return control.ErrNoFleet
				}
				return fmt.Errorf("fleet status: no daemon answers on %s: %w", opts.Config().Control.Socket,
					control.ErrUnavailable)
			}
			defer c.Close()
			fs, err := c.Fleet(cmd.Context())
			if errors.Is(err, control.ErrNoFleet) {
				return fmt.Errorf("%w: the daemon on %s runs without a fleet: section", control.ErrNoFleet, c.Socket())
			}
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), fs)
			}
			return printFleet(cmd.OutOrStdout(), fs)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printFleet prints the fleet as a table, this node marked with *.
func printFleet(w io.Writer, fs control.FleetStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tADDR\tPEER ADDR\tWEIGHT\tOWNED\tVERSION")
	for _, m := range fs.Members {
		name := m.Name
		if name == fs.Self {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f%%\t%s\n", name, m.State, m.Addr, orNone(m.PeerAddr),
			humanize.IBytes(uint64(max(m.Weight, 0))), 100*m.OwnedShare, m.Version)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := fs.Traffic
	var fromPeers int64
	for _, n := range t.PeerBytes {
		fromPeers += n
	}
	var peerErrs int64
	for _, n := range t.PeerErrors {
		peerErrs += n
	}
	_, err := fmt.Fprintf(w, "\nread from peers %s, from GCS %s; served to peers %s; peer errors %d, GCS fallbacks %d\n",
		humanize.IBytes(uint64(fromPeers)), humanize.IBytes(uint64(t.OriginBytes)),
		humanize.IBytes(uint64(t.ServedBytes)), peerErrs, t.Fallbacks)
	if err == nil && t.Failovers > 0 {
		_, err = fmt.Fprintf(w, "reads failed over from a peer %d, time lost %.3fs, longest %.3fs\n", t.Failovers,
			t.FailoverSeconds, t.FailoverMaxSeconds)
	}
	return err
}
