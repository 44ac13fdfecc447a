package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Protocol is the version of the data-socket protocol (and of the first
// line's format) this package speaks.
const Protocol = 1

// MaxMessage is the largest data-socket message; longer ones are
// malformed (an Error's text is cut to fit).
const MaxMessage = 4096

// Message types: the first uint32 of every message. Client messages are
// below 100, daemon messages from 101.
const (
	TypeHello    = 1
	TypeRelease  = 2
	TypeState    = 3
	TypeSeek     = 4
	TypeWelcome  = 101
	TypeReady    = 102
	TypeEpochEnd = 103
	TypeEnd      = 104
	TypeStateIs  = 105
	TypeError    = 106
)

// Python struct formats of the messages (see the package documentation).
const (
	HelloStruct    = "<II32s32s"
	ReleaseStruct  = "<IIQ"
	StateStruct    = "<I4x"
	SeekStruct     = "<I4xqq"
	WelcomeStruct  = "<IIQQII"
	ReadyStruct    = "<IIQqqII"
	EpochEndStruct = "<I4xqq"
	EndStruct      = "<I4xqq"
	StateIsStruct  = "<I4xqqQ"
	ErrorStruct    = "<II" // followed by UTF-8 text
)

// Error codes of an Error message.
const (
	// CodeProtocol: a malformed or unexpected message; the daemon ends
	// the session after sending it.
	CodeProtocol = 1
	// CodeLoader: the loader failed (a shard could not be read); no more
	// batches come.
	CodeLoader = 2
	// CodeRefused: a valid request that cannot be done now or with these
	// arguments (a Seek while slots are held, or out of range); the
	// session goes on.
	CodeRefused = 3
	// CodeInternal: anything else; the session ends.
	CodeInternal = 4
)

// ErrMessage means a data-socket message is malformed.
var ErrMessage = errors.New("ring: malformed message")

// Hello is the client's first message: the session it joins and the
// token from the session's first line.
type Hello struct {
	Protocol       uint32
	Session, Token string // at most 32 bytes each
}

// Release gives slot Slot, holding batch Seq, back to the daemon.
type Release struct {
	Slot uint32
	Seq  uint64
}

// StateRequest asks for the session's State.
type StateRequest struct{}

// Seek restarts the batches at batch Batch of epoch Epoch (set_epoch:
// Batch 0). The client must hold no slot.
type Seek struct{ Epoch, Batch int64 }

// Welcome answers Hello; the ring's memfd comes with it (SCM_RIGHTS).
type Welcome struct {
	Protocol             uint32
	RingBytes, SlotBytes uint64
	Slots, Arrays        uint32
}

// Ready hands slot Slot to the client: batch Index of Epoch, the Seq-th
// batch of the session (from 0), with N samples.
type Ready struct {
	Slot         uint32
	Seq          uint64
	Epoch, Index int64
	N            uint32
}

// EpochEnd follows the Ready of epoch Epoch's last batch (Batches of them).
type EpochEnd struct{ Epoch, Batches int64 }

// End follows the last batch of the last epoch; Epoch and Batch are the
// State after it.
type End struct{ Epoch, Batch int64 }

// StateIs answers StateRequest and Seek: the position after the batches
// the client released (see the package documentation), as a
// loader.State.
type StateIs struct {
	Epoch, Batch int64
	Fingerprint  uint64
}

// Error reports a failure; Code says what follows (Code* constants).
type Error struct {
	Code uint32
	Text string
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("ring: daemon error %d: %s", e.Code, e.Text) }

var le = binary.LittleEndian

// fixed writes s NUL-padded into n bytes.
func fixed(b []byte, s string, n int) []byte {
	return append(b, (s + string(make([]byte, max(n-len(s), 0))))[:n]...)
}

// Append encodes m after b. m is one of the message types (values, not
// pointers, except *Error); others panic.
func Append(b []byte, m any) []byte {
	u32, u64 := le.AppendUint32, le.AppendUint64
	switch m := m.(type) {
	case Hello:
		return fixed(fixed(u32(u32(b, TypeHello), m.Protocol), m.Session, 32), m.Token, 32)
	case Release:
		return u64(u32(u32(b, TypeRelease), m.Slot), m.Seq)
	case StateRequest:
		return u32(u32(b, TypeState), 0)
	case Seek:
		return u64(u64(u32(u32(b, TypeSeek), 0), uint64(m.Epoch)), uint64(m.Batch))
	case Welcome:
		b = u64(u64(u32(u32(b, TypeWelcome), m.Protocol), m.RingBytes), m.SlotBytes)
		return u32(u32(b, m.Slots), m.Arrays)
	case Ready:
		b = u64(u64(u64(u32(u32(b, TypeReady), m.Slot), m.Seq), uint64(m.Epoch)), uint64(m.Index))
		return u32(u32(b, m.N), 0)
	case EpochEnd:
		return u64(u64(u32(u32(b, TypeEpochEnd), 0), uint64(m.Epoch)), uint64(m.Batches))
	case End:
		return u64(u64(u32(u32(b, TypeEnd), 0), uint64(m.Epoch)), uint64(m.Batch))
	case StateIs:
		return u64(u64(u64(u32(u32(b, TypeStateIs), 0), uint64(m.Epoch)), uint64(m.Batch)), m.Fingerprint)
	case *Error:
		text := m.Text
		for len(text) > MaxMessage-8 {
			_, n := utf8.DecodeLastRuneInString(text)
			text = text[:len(text)-n]
		}
		return append(u32(u32(b, TypeError), m.Code), text...)
	}
	panic(fmt.Sprintf("ring: Append of %T", m))
}

// sizes are the fixed messages' sizes, by type.
var sizes = map[uint32]int{
	TypeHello: 72, TypeRelease: 16, TypeState: 8, TypeSeek: 24, TypeWelcome: 32, TypeReady: 40,
	TypeEpochEnd: 24, TypeEnd: 24, TypeStateIs: 32,
}

// DecodeMessage decodes one message: a Hello, Release, StateRequest,
// Seek, Welcome, Ready, EpochEnd, End, StateIs or *Error. A message of an
// unknown type, the wrong size or more than MaxMessage bytes is an error
// wrapping ErrMessage; DecodeMessage never panics.
func DecodeMessage(b []byte) (any, error) {
	if len(b) < 8 || len(b) > MaxMessage {
		return nil, fmt.Errorf("%w: %d bytes", ErrMessage, len(b))
	}
	t := le.Uint32(b)
	if t == TypeError {
		if !utf8.Valid(b[8:]) {
			return nil, fmt.Errorf("%w: error text is not UTF-8", ErrMessage)
		}
		return &Error{Code: le.Uint32(b[4:]), Text: string(b[8:])}, nil
	}
	size, ok := sizes[t]
	if !ok || len(b) != size {
		return nil, fmt.Errorf("%w: type %d of %d bytes", ErrMessage, t, len(b))
	}
	a := le.Uint32(b[4:])
	q := func(i int) uint64 { return le.Uint64(b[8+8*i:]) }
	switch t {
	case TypeHello:
		return Hello{Protocol: a, Session: unpad(b[8:40]), Token: unpad(b[40:72])}, nil
	case TypeRelease:
		return Release{Slot: a, Seq: q(0)}, nil
	case TypeState:
		return StateRequest{}, nil
	case TypeSeek:
		return Seek{Epoch: int64(q(0)), Batch: int64(q(1))}, nil
	case TypeWelcome:
		return Welcome{Protocol: a, RingBytes: q(0), SlotBytes: q(1), Slots: le.Uint32(b[24:]),
			Arrays: le.Uint32(b[28:])}, nil
	case TypeReady:
		return Ready{Slot: a, Seq: q(0), Epoch: int64(q(1)), Index: int64(q(2)), N: le.Uint32(b[32:])}, nil
	case TypeEpochEnd:
		return EpochEnd{Epoch: int64(q(0)), Batches: int64(q(1))}, nil
	case TypeEnd:
		return End{Epoch: int64(q(0)), Batch: int64(q(1))}, nil
	default: // TypeStateIs
		return StateIs{Epoch: int64(q(0)), Batch: int64(q(1)), Fingerprint: q(2)}, nil
	}
}

// unpad returns b up to its first NUL.
func unpad(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
