package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

func TestChown(t *testing.T) {
	plain := build(t, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/f", body: "hello"}, entry{name: "d/l", link: "f", typ: tar.TypeSymlink})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	for name, in := range map[string][]byte{"plain": plain, "gzip": gz.Bytes()} {
		out, err := Chown(in, 4242, 4343)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tr := tar.NewReader(bytes.NewReader(out))
		n := 0
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			n++
			if h.Uid != 4242 || h.Gid != 4343 || h.Uname != "" || h.Gname != "" {
				t.Errorf("%s: %s owned by %d:%d (%q:%q)", name, h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
			}
			if body, _ := io.ReadAll(tr); h.Name == "d/f" && string(body) != "hello" {
				t.Errorf("%s: body %q", name, body)
			}
		}
		if n != 3 {
			t.Errorf("%s: %d entries, want 3", name, n)
		}
	}
	if _, err := Chown([]byte("not a tar archive at all, not even close"), 1, 1); err == nil {
		t.Error("a corrupt archive was rewritten")
	}
}
