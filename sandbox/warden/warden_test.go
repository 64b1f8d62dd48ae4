//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sandbox/mux"
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

func TestInterfaces(t *testing.T) {
	dev := `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0: 1296      16    0    0    0     0          0         0      0       0    0    0    0     0       0          0
`
	got, err := interfaces(strings.NewReader(dev))
	if err != nil || !slices.Equal(got, []string{"lo", "eth0"}) {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := interfaces(strings.NewReader("a\nb\nno colon here\n")); err == nil {
		t.Fatal("a line without a name parsed")
	}
}

func TestWriteHosts(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "passwd")
	os.WriteFile(target, []byte("root:x:0:0\n"), 0o644)
	hosts := filepath.Join(dir, "hosts")
	if err := os.Symlink("passwd", hosts); err != nil {
		t.Fatal(err)
	}
	if err := writeHosts(hosts); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "root:x:0:0\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if fi, err := os.Lstat(hosts); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("hosts is not a regular file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(hosts); string(b) != mux.LoopbackHosts {
		t.Errorf("hosts: %q", b)
	}
}
