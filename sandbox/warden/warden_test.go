//go:build linux

package main

import (
	"slices"
	"testing"
)

func TestNumeric(t *testing.T) {
	for in, want := range map[string][]uint32{
		"0:0:":          {0, 0},
		"65534:65534:5": {65534, 65534, 5},
		"1000:100:4,27": {1000, 100, 4, 27},
	} {
		c, ok := numeric(in)
		if !ok {
			t.Errorf("%q: not numeric", in)
			continue
		}
		got := append([]uint32{c.Uid, c.Gid}, c.Groups...)
		if !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
	for _, in := range []string{"nobody", "0:0", "a:b:c", "1:2:x", "-1:0:", "99999999999:0:"} {
		if _, ok := numeric(in); ok {
			t.Errorf("%q parsed as numeric", in)
		}
	}
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b\011c\134`); got != "/a b\tc\\" {
		t.Errorf("%q", got)
	}
}

func FuzzNumeric(f *testing.F) {
	f.Add("1000:100:4,27")
	f.Add("0:0:")
	f.Fuzz(func(t *testing.T, s string) { numeric(s) })
}

func FuzzUnescape(f *testing.F) {
	f.Add(`/a\040b`)
	f.Fuzz(func(t *testing.T, s string) { unescape(s) })
}
