package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// The doc's e2e section lies between these markers.
const (
	beginMarker = "<!-- e2e:begin -->"
	endMarker   = "<!-- e2e:end -->"
)

// The targets.
const (
	targetWarm  = 10.0 // agent warm epoch at least this many times faster than direct GCS
	targetCold  = 1.25 // agent cold epoch at most this many times the link-limited ideal
	targetTorch = 0.8  // PyTorch through the mount at least this share of PyTorch on tmpfs
)

// torchReport is bench/torch_peer.py's --json output.
type torchReport struct {
	Samples        int64   `json:"samples"`
	Seconds        float64 `json:"seconds"`
	SamplesPerSec  float64 `json:"samples_per_sec"`
	Batch          int     `json:"batch"`
	Workers        int     `json:"workers"`
	PrefetchFactor int     `json:"prefetch_factor"`
	Torch          string  `json:"torch"`
}

// results is everything one report is made of.
type results struct {
	setup  setupRecord
	epochs []epochRecord
	// mount and tmpfs are the best of the PyTorch runs over each, and
	// torchRuns how many runs each had.
	mount, tmpfs torchReport
	torchRuns    int
	date         time.Time
	machine      string
	command      string
	notes        []string
}

// report is `e2e report`.
func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var (
		resultsFile = fs.String("results", "", "JSON lines of `e2e run` (required)")
		doc         = fs.String("doc", "", "markdown file to write the section into (default: stdout only)")
		command     = fs.String("command", "bench/e2e.sh", "the command that made the figures")
		loadStart   = fs.String("load-start", "", "load average when the run started")
	)
	var notes, mountFiles, tmpfsFiles multiFlag
	fs.Var(&notes, "note", "a line to add under the setup (repeatable)")
	fs.Var(&mountFiles, "torch-mount", "torch_peer.py --json over the FUSE mount (required; repeatable: the best counts)")
	fs.Var(&tmpfsFiles, "torch-tmpfs", "torch_peer.py --json over the tmpfs copy (required; repeatable: the best counts)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *resultsFile == "" || len(mountFiles) == 0 || len(mountFiles) != len(tmpfsFiles) {
		return errors.New("report: -results and as many -torch-mount as -torch-tmpfs files are required")
	}
	res := results{date: time.Now().UTC(), machine: machine(*loadStart), command: *command, notes: notes,
		torchRuns: len(mountFiles)}
	if err := readResults(*resultsFile, &res); err != nil {
		return err
	}
	var err error
	if res.mount, err = bestTorch(mountFiles); err != nil {
		return err
	}
	if res.tmpfs, err = bestTorch(tmpfsFiles); err != nil {
		return err
	}
	section, err := res.markdown()
	if err != nil {
		return err
	}
	os.Stdout.WriteString(section)
	if *doc == "" {
		return nil
	}
	old, err := os.ReadFile(*doc)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	updated, err := replaceSection(old, section)
	if err != nil {
		return fmt.Errorf("report: %s: %w", *doc, err)
	}
	return os.WriteFile(*doc, updated, 0o644)
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, "\n") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// readResults parses `e2e run`'s lines into res.
func readResults(path string, res *results) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var sawSetup bool
	for line := 1; sc.Scan(); line++ {
		var kind struct{ Kind string }
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		switch kind.Kind {
		case "setup":
			err, sawSetup = json.Unmarshal(sc.Bytes(), &res.setup), true
		case "epoch":
			var e epochRecord
			err = json.Unmarshal(sc.Bytes(), &e)
			res.epochs = append(res.epochs, e)
		default:
			err = fmt.Errorf("unknown kind %q", kind.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !sawSetup {
		return fmt.Errorf("%s: no setup line", path)
	}
	return nil
}

// bestTorch returns the fastest of the torch_peer.py reports in files.
func bestTorch(files []string) (torchReport, error) {
	var best torchReport
	for _, f := range files {
		var t torchReport
		if err := readJSON(f, &t); err != nil {
			return best, err
		}
		if t.SamplesPerSec > best.SamplesPerSec {
			best = t
		}
	}
	return best, nil
}

// readJSON decodes the JSON file at path into v.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// replaceSection returns doc with the text between the e2e markers
// (included) replaced by section, or with section appended if the doc has
// no markers.
func replaceSection(doc []byte, section string) ([]byte, error) {
	b, e := bytes.Index(doc, []byte(beginMarker)), bytes.Index(doc, []byte(endMarker))
	switch {
	case b < 0 && e < 0:
		out := bytes.TrimRight(doc, "\n")
		if len(out) > 0 {
			out = append(out, "\n\n"...)
		}
		return append(out, section...), nil
	case b < 0 || e < b:
		return nil, errors.New("e2e markers out of order or one missing")
	}
	e += len(endMarker)
	if e < len(doc) && doc[e] == '\n' {
		e++
	}
	out := append([]byte{}, doc[:b]...)
	out = append(out, section...)
	return append(out, doc[e:]...), nil
}

// machine describes this machine: cores, CPU, memory, kernel, Go, load.
func machine(loadStart string) string {
	var parts []string
	cpu := firstField("/proc/cpuinfo", "model name")
	parts = append(parts, fmt.Sprintf("%d cores (%s)", numCPU(), cpu))
	if mem := firstField("/proc/meminfo", "MemTotal"); mem != "" {
		var kb int64
		fmt.Sscanf(mem, "%d", &kb)
		parts = append(parts, fmt.Sprintf("%.0f GiB RAM", float64(kb)/(1<<20)))
	}
	if k, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(k)))
	}
	parts = append(parts, goVersion())
	load := "load average"
	if loadStart != "" {
		load += " " + loadStart + " at the start,"
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(l))
		if len(f) >= 3 {
			load += " " + strings.Join(f[:3], " ") + " at the end"
		}
	}
	return strings.Join(append(parts, load), ", ")
}

// firstField returns the value of the first "key : value" line of a /proc
// file, or "".
func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
