package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/cacheagent/cacheagent/mmapstore/megatron"
	"github.com/cacheagent/cacheagent/mmapstore/tokens"
	"github.com/cacheagent/cacheagent/mmapstore/webdataset"
)

// megatronReport describes a Megatron .idx file.
type megatronReport struct {
	DType     string `json:"dtype"`
	Sequences int    `json:"sequences"`
	Documents int    `json:"documents"`
	Tokens    int64  `json:"tokens"`
	Modes     bool   `json:"modes"`
}

// tokensReport describes an llm.c shard.
type tokensReport struct {
	Format  string `json:"format"`
	DType   string `json:"dtype"`
	Tokens  int    `json:"tokens"`
	Version int    `json:"version"`
	Header  int64  `json:"header_bytes"`
}

// tarReport describes a WebDataset tar.
type tarReport struct {
	Members int      `json:"members"`
	Samples int      `json:"samples"`
	Fields  []string `json:"fields"`
}

// inspectOther describes the token and record formats, recognised by
// content (a Megatron magic, an llm.c magic) or, for tars, by a .tar name;
// ok is false for none of them. A headerless token file has no header to
// show and is not recognised.
func inspectOther(rep *inspectReport, name string, b []byte) (ok bool, err error) {
	switch {
	case bytes.HasPrefix(b, []byte(megatron.Magic)):
		x, err := megatron.ParseIndex(b)
		if err != nil {
			return true, err
		}
		rep.Format = "megatron"
		rep.Megatron = &megatronReport{DType: x.DType.String(), Sequences: x.NumSequences(),
			Documents: x.NumDocuments(), Tokens: x.TotalTokens(), Modes: x.Modes() != nil}
		return true, nil
	case isLLMC(b):
		f, err := tokens.ParseLLMC(b)
		if err != nil {
			return true, err
		}
		rep.Format = "tokens"
		rep.Tokens = &tokensReport{Format: f.Format.String(), DType: f.DType.String(), Tokens: f.NumTokens(),
			Version: f.Version, Header: f.Offset}
		return true, nil
	case strings.HasSuffix(name, ".tar"):
		s, err := webdataset.Index(b)
		if err != nil {
			return true, err
		}
		rep.Format = "webdataset"
		rep.Tar = &tarReport{Members: len(s.Members()), Samples: s.NumSamples(), Fields: s.Fields()}
		return true, nil
	}
	return false, nil
}

// isLLMC reports whether b starts with an llm.c magic.
func isLLMC(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	m := binary.LittleEndian.Uint32(b)
	return m == tokens.MagicUint16 || m == tokens.MagicUint32
}

// printOther prints the token and record formats' reports.
func printOther(w io.Writer, rep inspectReport) {
	switch {
	case rep.Megatron != nil:
		m := rep.Megatron
		fmt.Fprintf(w, "format\tmegatron index\ndtype\t%s\nsequences\t%d\ndocuments\t%d\ntokens\t%d\nmodes\t%v\n",
			m.DType, m.Sequences, m.Documents, m.Tokens, m.Modes)
	case rep.Tokens != nil:
		t := rep.Tokens
		fmt.Fprintf(w, "format\ttokens (%s, version %d)\ndtype\t%s\ntokens\t%d\nheader\t%d bytes\n",
			t.Format, t.Version, t.DType, t.Tokens, t.Header)
	case rep.Tar != nil:
		t := rep.Tar
		fmt.Fprintf(w, "format\twebdataset tar\nmembers\t%d\nsamples\t%d\nfields\t%s\n",
			t.Members, t.Samples, strings.Join(t.Fields, ", "))
	}
}
