package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/gpu"
)

// newGPUCmd returns `cacheagent gpu`, whose `info` lists the GPUs.
func newGPUCmd(_ *cli.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "Inspect the GPUs the agent can feed",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newGPUInfoCmd())
	return cmd
}

func newGPUInfoCmd() *cobra.Command {
	var asJSON bool
	mode := gpu.ModeAuto
	cmd := &cobra.Command{
		Use:   "info",
		Short: "List GPUs: memory, PCIe link and its ceiling, NUMA node and local CPUs",
		Long: `List the GPUs the agent can feed. On a machine without an NVIDIA GPU or driver
it prints why, in one line, and exits 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := cli.OpenGPU(cmd.Context(), mode)
			if err != nil {
				return err
			}
			defer b.Close()
			out := cmd.OutOrStdout()
			if none, ok := b.(*gpu.None); ok {
				return cli.PrintNoGPU(out, mode, none, asJSON)
			}
			sys := b.System()
			rep := cli.GPUInfoReport{Backend: b.Kind().String(), Available: true, Driver: sys.Driver,
				CUDAVersion: sys.CUDAVersion, Notes: sys.Notes}
			for _, d := range sys.Devices {
				rep.Devices = append(rep.Devices, cli.GPUDeviceReport{DeviceInfo: d, CeilingGBps: round2(d.Link.Ceiling())})
			}
			if asJSON {
				return cli.WriteJSON(out, rep)
			}
			return printGPUInfo(out, rep)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().Var(&mode, "gpu", "GPU backend: auto, cuda, fake or none")
	return cmd
}

func printGPUInfo(out io.Writer, rep cli.GPUInfoReport) error {
	var head []string
	if rep.Driver != "" {
		head = append(head, "driver "+rep.Driver)
	}
	if v := rep.CUDAVersion; v > 0 {
		head = append(head, fmt.Sprintf("CUDA %d.%d", v/1000, v%1000/10))
	}
	head = append(head, rep.Backend+" backend")
	fmt.Fprintln(out, strings.Join(head, ", "))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tBUS ID\tMEMORY\tPCIE\tCEILING\tNUMA\tCPUS\tUUID")
	for _, d := range rep.Devices {
		mem := humanize.IBytes(d.MemTotal)
		if d.MemFree > 0 {
			mem = humanize.IBytes(d.MemFree) + " free of " + mem
		}
		ceiling, numa := "-", "-"
		if d.CeilingGBps > 0 {
			ceiling = fmt.Sprintf("%.1f GB/s", d.CeilingGBps)
		}
		if d.NUMANode >= 0 {
			numa = fmt.Sprint(d.NUMANode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Ordinal, d.Name, d.BusID, mem,
			cli.LinkString(d.Link), ceiling, numa, dash(d.CPUList()), dash(d.UUID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(out, "note: "+n)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
