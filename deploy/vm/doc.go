// Package vm holds the example of cacheagent's fleet mode on plain VMs
// (README.md): a config with a static join list and the systemd drop-in
// that gives it the VM's address. Its test checks that the config parses
// with the daemon's loader. It has no Go code of its own.
package vm
