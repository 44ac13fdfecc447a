package ring

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// testArrays are x (uint8 rows of 10), y (scalar int64) and the ids.
var testArrays = []ArraySpec{
	{Name: "x", DType: "|u1", Row: []int{10}},
	{Name: "y", DType: "<f4", Row: []int{2, 3}},
	{Name: "ids", DType: "<i8", Row: []int{}},
}

func TestNewLayout(t *testing.T) {
	l, err := NewLayout(100, testArrays)
	if err != nil {
		t.Fatal(err)
	}
	wantOff := []int{4096, 8192, 12288}
	wantCap := []int{4096, 4096, 4096}
	if !reflect.DeepEqual(l.Offsets, wantOff) || !reflect.DeepEqual(l.Capacity, wantCap) || l.SlotBytes != 16384 {
		t.Errorf("NewLayout = offsets %v, capacity %v, %d bytes; want %v, %v, 16384", l.Offsets, l.Capacity,
			l.SlotBytes, wantOff, wantCap)
	}
	if want := []int{10, 24, 8}; !reflect.DeepEqual(l.RowBytes, want) {
		t.Errorf("RowBytes = %v; want %v", l.RowBytes, want)
	}
	for _, bad := range [][]ArraySpec{
		nil,
		{{Name: "x", DType: "f4"}},
		{{Name: "x", DType: "<U4"}},
		{{Name: "x", DType: "<f0"}},
		{{Name: "x", DType: "<f4", Row: []int{-1}}},
		{{Name: "x", DType: "<f4", Row: []int{1, 1, 1, 1, 1, 1, 1, 1}}},
		{{Name: "x", DType: "<f4", Row: []int{1 << 40, 1 << 40}}},
	} {
		if _, err := NewLayout(4, bad); !errors.Is(err, ErrLayout) {
			t.Errorf("NewLayout(%v) = %v; want ErrLayout", bad, err)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	l, err := NewLayout(100, testArrays)
	if err != nil {
		t.Fatal(err)
	}
	slot := make([]byte, l.SlotBytes)
	if err := l.Encode(slot, Header{Seq: 7, Epoch: 2, Index: 3, State: StateReady}, 42); err != nil {
		t.Fatal(err)
	}
	h, descs, err := Decode(slot, len(testArrays))
	if err != nil {
		t.Fatal(err)
	}
	wantH := Header{Version: LayoutVersion, Arrays: 3, Seq: 7, Epoch: 2, Index: 3, Samples: 42, State: StateReady,
		SlotSize: uint64(l.SlotBytes)}
	if h != wantH {
		t.Errorf("header = %+v; want %+v", h, wantH)
	}
	want := []Desc{
		{Name: 0, DType: "|u1", Shape: []int{42, 10}, Offset: 4096, NBytes: 420},
		{Name: 1, DType: "<f4", Shape: []int{42, 2, 3}, Offset: 8192, NBytes: 42 * 24},
		{Name: 2, DType: "<i8", Shape: []int{42}, Offset: 12288, NBytes: 336},
	}
	if !reflect.DeepEqual(descs, want) {
		t.Errorf("descriptors = %+v; want %+v", descs, want)
	}
	if binary.LittleEndian.Uint32(slot) != 0x31475243 || string(slot[:4]) != "CRG1" {
		t.Errorf("magic bytes %q", slot[:4])
	}
	SetState(slot, StateFilling)
	if h, _, _ := Decode(slot, 0); h.State != StateFilling {
		t.Errorf("state after SetState = %d", h.State)
	}
	if err := l.Encode(slot, Header{}, 101); !errors.Is(err, ErrLayout) {
		t.Errorf("Encode of 101 samples = %v; want ErrLayout", err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	l, _ := NewLayout(4, testArrays)
	good := make([]byte, l.SlotBytes)
	l.Encode(good, Header{}, 4)
	for name, mutate := range map[string]func(b []byte) []byte{
		"short":        func(b []byte) []byte { return b[:10] },
		"magic":        func(b []byte) []byte { b[0] = 'X'; return b },
		"version":      func(b []byte) []byte { b[OffVersion] = 9; return b },
		"arrays":       func(b []byte) []byte { b[OffArrays] = 4; return b },
		"slot size":    func(b []byte) []byte { binary.LittleEndian.PutUint64(b[OffSlotBytes:], 1<<40); return b },
		"name index":   func(b []byte) []byte { b[HeaderSize+DescOffName] = 3; return b },
		"ndim":         func(b []byte) []byte { b[HeaderSize+DescOffNDim] = 9; return b },
		"dtype":        func(b []byte) []byte { b[HeaderSize+DescOffDType] = 'x'; return b },
		"negative dim": func(b []byte) []byte { binary.LittleEndian.PutUint64(b[HeaderSize+DescOffShape:], 1<<63); return b },
		"nbytes":       func(b []byte) []byte { b[HeaderSize+DescOffNBytes]++; return b },
		"offset":       func(b []byte) []byte { binary.LittleEndian.PutUint64(b[HeaderSize+DescOffOffset:], 1<<62); return b },
	} {
		b := mutate(append([]byte(nil), good...))
		if _, _, err := Decode(b, len(testArrays)); !errors.Is(err, ErrLayout) {
			t.Errorf("%s: Decode = %v; want ErrLayout", name, err)
		}
	}
}

// FuzzDecode checks that Decode never panics, and that what it accepts
// stays inside the slot.
func FuzzDecode(f *testing.F) {
	l, _ := NewLayout(4, testArrays)
	good := make([]byte, l.SlotBytes)
	l.Encode(good, Header{Seq: 1}, 3)
	f.Add(good[:HeaderSize+3*DescSize], uint16(0))
	f.Add(good, uint16(3))
	f.Fuzz(func(t *testing.T, b []byte, names uint16) {
		h, descs, err := Decode(b, int(names))
		if err != nil {
			return
		}
		if h.SlotSize > uint64(len(b)) || len(descs) != h.Arrays {
			t.Fatalf("accepted header %+v with %d descriptors in %d bytes", h, len(descs), len(b))
		}
		for _, d := range descs {
			if d.Offset < 0 || d.NBytes < 0 || uint64(d.Offset+d.NBytes) > h.SlotSize {
				t.Fatalf("accepted descriptor %+v outside a slot of %d", d, h.SlotSize)
			}
		}
	})
}

// TestLayoutVariable lays out variable-length arrays: their room is Bytes,
// and Encode takes their shapes from the caller, refusing one that does not
// fit or is missing.
func TestLayoutVariable(t *testing.T) {
	arrays := []ArraySpec{{Name: "f.offsets", DType: "<i8", Row: []int{}, Bytes: 8 * 5},
		{Name: "f.data", DType: "|u1", Row: []int{}, Bytes: 10000}, {Name: "ids", DType: "<i8", Row: []int{}}}
	l, err := NewLayout(4, arrays)
	if err != nil {
		t.Fatal(err)
	}
	if l.Capacity[0] != Align || l.Capacity[1] != 3*Align {
		t.Fatalf("capacities %v; want %d and %d", l.Capacity, Align, 3*Align)
	}
	slot := make([]byte, l.SlotBytes)
	if err := l.Encode(slot, Header{Seq: 1}, 3, []int{4}, []int{777}); err != nil {
		t.Fatal(err)
	}
	_, descs, err := Decode(slot, len(arrays))
	if err != nil {
		t.Fatal(err)
	}
	if d := descs[1]; d.NBytes != 777 || len(d.Shape) != 1 || d.Shape[0] != 777 || descs[0].NBytes != 32 ||
		descs[2].NBytes != 24 {
		t.Fatalf("descriptors %+v", descs)
	}
	for _, shapes := range [][][]int{{{4}}, {{4}, {10001 + Align*3}}, {{6}, {1}}} {
		if err := l.Encode(slot, Header{}, 3, shapes...); !errors.Is(err, ErrLayout) {
			t.Errorf("Encode with shapes %v = %v; want ErrLayout", shapes, err)
		}
	}
}
