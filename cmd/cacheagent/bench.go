package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
)

// benchCommand is the command that holds the demo and the benchmarks, so
// that this one links no emulator or benchmark code.
const benchCommand = "cacheagent-bench"

// newDemoCmd is `cacheagent demo`: `cacheagent-bench demo`.
func newDemoCmd() *cobra.Command {
	return newForwardCmd("demo", "Run the agent on an embedded GCS emulator with a synthetic dataset", "demo")
}

// newBenchCmd is `cacheagent bench …`: `cacheagent-bench …`.
func newBenchCmd() *cobra.Command {
	return newForwardCmd("bench loader|gpu|control …", "Run the project's benchmarks: loader, gpu, control")
}

// newForwardCmd returns a command that runs cacheagent-bench with prefix
// and the command's arguments, flags included, unparsed.
func newForwardCmd(use, short string, prefix ...string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short + " (runs " + benchCommand + ")",
		Long: short + ".\n\nThis runs `" + strings.Join(append([]string{benchCommand}, prefix...), " ") +
			" …` with the same arguments, found beside cacheagent or on PATH: see `" + benchCommand + " --help`.",
		DisableFlagParsing: true,
		// Neither logging nor the configuration is this process's to set up.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, args []string) error {
			return execBench(cmd.CommandPath(), slices.Concat(prefix, args))
		},
	}
}

// execBench replaces this process with cacheagent-bench and args, so that
// signals reach it and its exit status is this command's. what names the
// forwarding command in the error saying how to get cacheagent-bench when
// there is none.
func execBench(what string, args []string) error {
	path, err := cli.LookPath(benchCommand)
	if err != nil {
		example := "--help"
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			example = args[0]
		}
		return fmt.Errorf("%s runs %s, which is neither beside cacheagent nor on PATH (%w); "+
			"build it beside cacheagent:\n"+
			"  go build -o \"$(dirname $(command -v cacheagent))/%s\" ./bench/cmd/%s\n"+
			"or run it from a checkout of the repository: go run ./bench/cmd/%s %s",
			what, benchCommand, err, benchCommand, benchCommand, benchCommand, example)
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return fmt.Errorf("%s: exec %s: %w", what, path, err)
}
