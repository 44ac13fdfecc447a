// Command cacheagent-bench holds cacheagent's demo and benchmarks: demo
// (the agent against an embedded GCS emulator with a synthetic dataset),
// loader, gpu and control. It links the GCS emulator, which the daemon
// (cmd/cacheagent) does not; `cacheagent demo` and `cacheagent bench …`
// run it when it is installed beside cacheagent or on PATH.
//
// See docs/benchmarks.md for what the benchmarks measure and README.md for
// the demo.
package main

import (
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
)

func main() {
	cli.Main(newRootCmd())
}

func newRootCmd() *cobra.Command {
	opts := &cli.Options{}
	root := &cobra.Command{
		Use:   "cacheagent-bench",
		Short: "Run cacheagent's demo and benchmarks",
		Long: `cacheagent-bench runs cacheagent's demo, which needs no cloud account, and its
benchmarks. It takes cacheagent's common flags (--cache-dir, --endpoint, --config, …).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return opts.Setup(cmd, opts.LogLevel)
		},
	}
	opts.Register(root.PersistentFlags())
	root.AddCommand(
		newDemoCmd(opts),
		newBenchLoaderCmd(opts),
		newBenchGPUCmd(opts),
		newBenchControlCmd(opts),
		newBenchControlLoadCmd(opts),
		newBenchCheckpointCmd(opts),
	)
	return root
}
