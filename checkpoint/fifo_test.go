package checkpoint

import "golang.org/x/sys/unix"

// mkfifo creates a named pipe at p.
func mkfifo(p string) error { return unix.Mkfifo(p, 0o644) }
