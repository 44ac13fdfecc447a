package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
)

// statusReport is what `cacheagent status --json` prints.
type statusReport struct {
	CacheDir string       `json:"cache_dir"`
	Tiers    []tierReport `json:"tiers"`
}

// tierReport describes one tier's usage.
type tierReport struct {
	Name        string  `json:"name"`
	Dir         string  `json:"dir"`
	Entries     int64   `json:"entries"`
	UsedBytes   int64   `json:"used_bytes"`
	MaxBytes    int64   `json:"max_bytes"`
	PinnedBytes int64   `json:"pinned_bytes"`
	Hits        int64   `json:"hits"`
	Misses      int64   `json:"misses"`
	HitRatio    float64 `json:"hit_ratio"`
	Fetched     int64   `json:"bytes_fetched"`
	Evictions   int64   `json:"evictions"`
}

func newStatusCmd(opts *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show tiers, usage and hit ratios",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := openAgent(cmd.Context(), opts)
			if err != nil {
				return err
			}
			defer a.Close()
			s := a.cache.Stats()
			disk := tierReport{Name: "disk", Dir: opts.cacheDir, Entries: int64(s.Entries),
				UsedBytes: s.UsedBytes, MaxBytes: s.MaxBytes, PinnedBytes: s.PinnedBytes,
				Hits: s.Hits, Misses: s.Misses, Fetched: s.BytesFetched, Evictions: s.Evictions}
			if n := disk.Hits + disk.Misses; n > 0 {
				disk.HitRatio = float64(disk.Hits) / float64(n)
			}
			rep := statusReport{CacheDir: opts.cacheDir, Tiers: []tierReport{disk}}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIER\tENTRIES\tUSED\tMAX\tUSE%\tPINNED\tDIR")
			for _, t := range rep.Tiers {
				pct := 0.0
				if t.MaxBytes > 0 {
					pct = 100 * float64(t.UsedBytes) / float64(t.MaxBytes)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.1f\t%s\t%s\n", t.Name, t.Entries,
					humanize.IBytes(uint64(t.UsedBytes)), humanize.IBytes(uint64(t.MaxBytes)), pct,
					humanize.IBytes(uint64(t.PinnedBytes)), t.Dir)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
