// Package cli holds what the two commands, cacheagent (the daemon and its
// CLI) and cacheagent-bench (the demo and the benchmarks), share: the
// common flags and their resolution into a daemon.Config with the config
// file, the standalone wiring of source and cache (Agent), the loader's
// dataset and order flags, logging, GPU backend opening and reports, and
// finding one command's executable from the other.
package cli
