// Command cacheagent caches Google Cloud Storage objects on local NVMe for ML
// training jobs: a daemon (serve) and a CLI that works through the daemon or
// standalone on the same cache directory. The demo and the benchmarks live
// in cacheagent-bench (bench/cmd/cacheagent-bench), which `cacheagent demo` and
// `cacheagent bench …` run.
//
// See docs/architecture.md for the design and README.md for a quick start.
package main

import "github.com/cacheagent/cacheagent/cmd/cli"

func main() {
	cli.Main(newRootCmd())
}
