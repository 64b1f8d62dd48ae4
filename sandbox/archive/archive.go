// Package archive checks and extracts tar archives that come from untrusted
// places (datasets, plugins): absolute paths, ".." components, links that
// escape the target and device files are refused with an error naming the
// entry. It imports only the standard library, so plugins compiled to wasm
// can run the same check.
package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrUnsafe is matched by every refusal.
var ErrUnsafe = errors.New("unsafe archive")

// EntryError names the entry that was refused and why.
type EntryError struct {
	Name   string
	Reason string
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("unsafe archive entry %q: %s", e.Name, e.Reason)
}

// Unwrap makes EntryError match ErrUnsafe.
func (e *EntryError) Unwrap() error { return ErrUnsafe }

// CheckEntry validates one header: its name and, for links, its target,
// must stay inside the archive's root.
func CheckEntry(h *tar.Header) error {
	name := h.Name
	if err := checkPath(name); err != nil {
		return &EntryError{Name: name, Reason: err.Error()}
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
	case tar.TypeSymlink:
		target := h.Linkname
		if path.IsAbs(target) {
			return &EntryError{Name: name, Reason: fmt.Sprintf("symlink to absolute path %q", target)}
		}
		if escapes(path.Dir(strings.ReplaceAll(name, `\`, "/")) + "/" + target) {
			return &EntryError{Name: name, Reason: fmt.Sprintf("symlink %q escapes the archive", target)}
		}
	case tar.TypeLink:
		if err := checkPath(h.Linkname); err != nil {
			return &EntryError{Name: name, Reason: fmt.Sprintf("hard link to %q: %v", h.Linkname, err)}
		}
	default:
		return &EntryError{Name: name, Reason: fmt.Sprintf("file type %q not allowed", string(h.Typeflag))}
	}
	return nil
}

func checkPath(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if strings.ContainsRune(name, 0) {
		return errors.New("NUL in name")
	}
	n := strings.ReplaceAll(name, `\`, "/")
	if path.IsAbs(n) || filepath.VolumeName(name) != "" {
		return errors.New("absolute path")
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return errors.New(`".." in path`)
		}
	}
	return nil
}

// escapes reports whether a slash path, resolved lexically from "/", climbs
// above the root at any point.
func escapes(p string) bool {
	depth := 0
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// Check reads a whole tar stream (plain or gzip) and refuses unsafe entries.
func Check(r io.Reader) error {
	tr, err := Reader(r)
	if err != nil {
		return err
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if err := CheckEntry(h); err != nil {
			return err
		}
	}
}

// Reader opens a tar stream, transparently gunzipping it.
func Reader(r io.Reader) (*tar.Reader, error) {
	var head [2]byte
	br := io.MultiReader()
	n, err := io.ReadFull(r, head[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("read archive: %w", err)
	}
	br = io.MultiReader(bytes.NewReader(head[:n]), r)
	if n == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		return tar.NewReader(zr), nil
	}
	return tar.NewReader(br), nil
}

// Extract writes a tar stream (plain or gzip) into dir, refusing unsafe
// entries before writing them and never following a link out of dir.
func Extract(r io.Reader, dir string) error {
	tr, err := Reader(r)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if err := CheckEntry(h); err != nil {
			return err
		}
		name := path.Clean(strings.ReplaceAll(h.Name, `\`, "/"))
		if name == "." {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
		case tar.TypeReg, tar.TypeRegA:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("extract %s: %w", h.Name, err)
				}
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode|0o200)
			if err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
		case tar.TypeLink:
			if err := root.Link(path.Clean(h.Linkname), name); err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
		}
	}
}

// Pack writes path (a file or a folder, walked in lexical order) to tw,
// with entry names relative to base and without owner names. Links are
// stored as links, never followed.
func Pack(tw *tar.Writer, path, base string) error {
	return filepath.Walk(path, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(base, p)
		if err != nil || rel == "." {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}
