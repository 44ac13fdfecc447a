package array

import "testing"

func TestTypestr(t *testing.T) {
	for _, tc := range []struct {
		d    DType
		bo   ByteOrder
		want string
	}{
		{Float32, Little, "<f4"}, {Int64, Big, ">i8"}, {Uint8, NotApplicable, "|u1"}, {Bool, Little, "|b1"},
		{Complex128, Little, "<c16"}, {Float16, Big, ">f2"}, {Int16, NotApplicable, "|i2"},
	} {
		got, ok := tc.d.Typestr(tc.bo)
		if !ok || got != tc.want {
			t.Errorf("%s.Typestr(%s) = %q, %v; want %q", tc.d, tc.bo, got, ok, tc.want)
		}
	}
	for _, d := range []DType{0, BFloat16, DType(200)} {
		if s, ok := d.Typestr(Little); ok {
			t.Errorf("%s.Typestr = %q; want none", d, s)
		}
	}
	// Every type with a type string parses back to itself.
	for d := Bool; d.Valid(); d++ {
		s, ok := d.Typestr(Big)
		if !ok {
			continue
		}
		got, bo := ParseTypestr(s)
		wantBO := Big
		if d.Size() == 1 {
			wantBO = NotApplicable
		}
		if got != d || bo != wantBO {
			t.Errorf("ParseTypestr(%q) = %s, %s; want %s, %s", s, got, bo, d, wantBO)
		}
	}
	for _, s := range []string{"", "<", "|", "f3", "<V8", "O", "<f4x"} {
		if d, _ := ParseTypestr(s); d != 0 {
			t.Errorf("ParseTypestr(%q) = %s; want none", s, d)
		}
	}
	if d, bo := ParseTypestr("=f8"); d != Float64 || bo != HostByteOrder() {
		t.Errorf("ParseTypestr(=f8) = %s, %s; want float64 in the host's order", d, bo)
	}
}
