package synth

import (
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/npy"
)

func TestFiles(t *testing.T) {
	d := Dataset{Rows: []int{3, 5}, RowBytes: 20}
	for i := range d.Rows {
		x, err := npy.Parse(d.X(i))
		if err != nil {
			t.Fatalf("x %d: %v", i, err)
		}
		y, err := npy.Parse(d.Y(i))
		if err != nil {
			t.Fatalf("y %d: %v", i, err)
		}
		ids, err := y.Int64s()
		if err != nil {
			t.Fatalf("y %d view: %v", i, err)
		}
		if x.Shape[0] != d.Rows[i] || len(ids) != d.Rows[i] || x.Offset%64 != 0 {
			t.Fatalf("shard %d: x shape %v, %d ids, offset %d", i, x.Shape, len(ids), x.Offset)
		}
		for r := range d.Rows[i] {
			row, _ := x.Row(r)
			want := d.First(i) + int64(r)
			if RowID(row) != want || ids[r] != want {
				t.Errorf("shard %d row %d: x id %d, y %d; want %d", i, r, RowID(row), ids[r], want)
			}
		}
	}
	if d.Samples() != 8 {
		t.Errorf("Samples = %d", d.Samples())
	}
	for _, shape := range [][]int{{7}, {2, 3, 4}, {}} {
		h, err := npy.ParseHeader(NPYHeader("<f4", shape))
		if err != nil || len(h.Shape) != len(shape) || h.DataOffset%64 != 0 {
			t.Errorf("header of %v: %+v, %v", shape, h, err)
		}
	}
}
