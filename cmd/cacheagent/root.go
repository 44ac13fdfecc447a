package main

import (
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
)

func newRootCmd() *cobra.Command {
	opts := &cli.Options{}
	root := &cobra.Command{
		Use:   "cacheagent",
		Short: "Cache Google Cloud Storage datasets on local NVMe for ML training",
		Long: `cacheagent turns gs://bucket/prefix into verified files on local NVMe that survive
restarts: parallel sliced downloads, CRC32C verification, generation pinning, a byte
budget with LRU eviction and pinning.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			level := opts.LogLevel
			if cmd.Name() == "serve" && !cmd.Flags().Changed("log-level") {
				level = "info"
			}
			return opts.Setup(cmd, level)
		},
	}
	opts.Register(root.PersistentFlags())

	root.AddCommand(
		newServeCmd(opts),
		newPrefetchCmd(opts),
		newCatCmd(opts),
		newLsCmd(opts),
		newStatusCmd(opts),
		newPinCmd(opts, "pin"),
		newPinCmd(opts, "unpin"),
		newPinCmd(opts, "evict"),
		newVerifyCmd(opts),
		newJobsCmd(opts),
		newFleetCmd(opts),
		newInspectCmd(opts),
		newLoaderCmd(opts),
		newCheckpointCmd(opts),
		newMountCmd(opts),
		newDemoCmd(),
		newBenchCmd(),
		newGPUCmd(opts),
		newVersionCmd(),
	)
	return root
}
