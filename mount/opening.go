package mount

import (
	"fmt"
	"sync/atomic"
)

// OpenMode says whether the kernel asks this process to open each file.
type OpenMode uint8

const (
	// OpenAuto (the default) lets the first open of a file decide, for the
	// whole mount, from the listing that file belongs to: if files of at
	// most SmallFileSize hold at least SmallFileShare of its bytes (a
	// dataset of many small files: images, audio clips, JSON records), the
	// kernel opens files itself (OpenSkip); otherwise it asks (OpenAsk).
	OpenAuto OpenMode = iota
	// OpenAsk makes every open a request to this process, which holds the
	// cached copy open for the file's lifetime and, where the kernel
	// offers passthrough, hands it to the kernel to read itself.
	OpenAsk
	// OpenSkip lets the kernel open files without asking (FUSE "no
	// open"): once a file's pages are in the kernel's page cache, opening
	// and reading it again costs no request at all, which roughly doubles
	// the rate of reading small files. In exchange there is no passthrough
	// for the whole mount: the kernel asks this process for the pages it
	// lacks, and those pages are held twice in memory (the mount's and the
	// cached file's). See "Opening files" in the package doc.
	OpenSkip
)

// The rule OpenAuto applies.
const (
	// SmallFileSize is the largest file OpenAuto counts as small: one
	// read request of the kernel's (1 MiB) covers it.
	SmallFileSize = maxRead
	// SmallFileShare is the share of a listing's bytes that must lie in
	// small files for OpenAuto to choose OpenSkip.
	SmallFileShare = 0.9
)

// String returns "auto", "ask" or "skip".
func (m OpenMode) String() string {
	switch m {
	case OpenAuto:
		return "auto"
	case OpenAsk:
		return "ask"
	case OpenSkip:
		return "skip"
	}
	return fmt.Sprintf("OpenMode(%d)", uint8(m))
}

// ParseOpenMode parses "auto" (or ""), "ask" or "skip".
func ParseOpenMode(s string) (OpenMode, error) {
	switch s {
	case "", "auto":
		return OpenAuto, nil
	case "ask":
		return OpenAsk, nil
	case "skip":
		return OpenSkip, nil
	}
	return 0, fmt.Errorf("mount: open mode %q: want auto, ask or skip", s)
}

// opening is how a mount answers opens: OpenAsk or OpenSkip once decided,
// OpenAuto until the first open decides. It only ever leaves OpenAuto.
type opening struct{ mode atomic.Uint32 }

// get returns the mode decided, or OpenAuto.
func (o *opening) get() OpenMode { return OpenMode(o.mode.Load()) }

// decide settles the mode with want, unless it is settled already, and
// returns the mode in force and whether this call settled it.
func (o *opening) decide(want OpenMode) (OpenMode, bool) {
	if o.mode.CompareAndSwap(uint32(OpenAuto), uint32(want)) {
		return want, true
	}
	return o.get(), false
}

// skipOpen reports whether to answer the open of n with ENOSYS, which the
// kernel remembers for the whole mount: it opens every file itself from
// then on. In an OpenAuto mount the first open decides, by n's listing.
func (f *FS) skipOpen(n *fileNode) bool {
	m := f.opening.get()
	if m == OpenAuto {
		want, share, files := f.autoMode(n)
		var settled bool
		if m, settled = f.opening.decide(want); settled {
			f.cfg.log.Info("mount: how files open, decided at the first open (mount.open: auto)",
				"open", m.String(), "bucket", n.b.name, "files_listed", files,
				"bytes_in_small_files", fmt.Sprintf("%.1f%%", 100*share),
				"small_file_max_bytes", SmallFileSize)
		}
	}
	return m == OpenSkip
}

// autoMode is OpenAuto's choice for a mount whose first open is of n, with
// the share of the listed bytes that lie in small files, and the number of
// files listed.
func (f *FS) autoMode(n *fileNode) (OpenMode, float64, int) {
	n.b.mu.Lock()
	l := n.b.cur
	n.b.mu.Unlock()
	if l == nil { // cannot happen: n was looked up in a listing
		return OpenAsk, 0, 0
	}
	share := 1.0 // a listing of empty files: nothing to read
	if l.bytes > 0 {
		share = float64(l.smallBytes) / float64(l.bytes)
	}
	if share >= SmallFileShare {
		return OpenSkip, share, l.objects
	}
	return OpenAsk, share, l.objects
}

// Opening returns how the mount answers opens: OpenAsk or OpenSkip, or
// OpenAuto while no file has been opened yet in an OpenAuto mount.
func (s *Server) Opening() OpenMode { return s.fs.opening.get() }
