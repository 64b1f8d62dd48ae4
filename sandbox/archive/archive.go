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
	"slices"
	"strings"
	"syscall"
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

// Checker checks the entries of one archive in order. Beyond CheckEntry,
// it remembers the archive's own symlinks and resolves every later name and
// link target through them, so a chain (b -> ., a -> b/.., a/x) that
// escapes only once its links are followed is refused too.
type Checker struct {
	links map[string]string // symlink name (cleaned) → target
}

// Check validates the next header of the archive.
func (c *Checker) Check(h *tar.Header) error {
	if err := CheckEntry(h); err != nil {
		return err
	}
	name := path.Clean(strings.ReplaceAll(h.Name, `\`, "/"))
	if name == "." {
		return nil
	}
	dir, base := path.Split(name)
	resolved, err := c.resolve(dir, 0)
	if err != nil {
		return &EntryError{Name: h.Name, Reason: err.Error()}
	}
	if h.Typeflag == tar.TypeLink {
		if _, err := c.resolve(h.Linkname, 0); err != nil {
			return &EntryError{Name: h.Name, Reason: "hard link " + err.Error()}
		}
	}
	if h.Typeflag == tar.TypeSymlink {
		// Not path.Join: cleaning "b/.." lexically would skip link b.
		if _, err := c.resolve(resolved+"/"+h.Linkname, 0); err != nil {
			return &EntryError{Name: h.Name, Reason: fmt.Sprintf("symlink %q %v", h.Linkname, err)}
		}
		if c.links == nil {
			c.links = map[string]string{}
		}
		c.links[path.Join(resolved, base)] = h.Linkname
	} else {
		delete(c.links, path.Join(resolved, base))
	}
	return nil
}

// resolve follows p through the archive's links, component by component,
// and returns the path it names inside the archive, or an error when it
// climbs out.
func (c *Checker) resolve(p string, depth int) (string, error) {
	if depth > 40 {
		return "", errors.New("resolves through too many links")
	}
	var stack []string
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", errors.New("escapes the archive through its links")
			}
			stack = stack[:len(stack)-1]
			continue
		}
		stack = append(stack, part)
		target, ok := c.links[strings.Join(stack, "/")]
		if !ok {
			continue
		}
		if path.IsAbs(target) {
			return "", errors.New("resolves through a link to an absolute path")
		}
		stack = stack[:len(stack)-1]
		r, err := c.resolve(strings.Join(append(slices.Clone(stack), target), "/"), depth+1)
		if err != nil {
			return "", err
		}
		stack = nil
		if r != "" {
			stack = strings.Split(r, "/")
		}
	}
	return strings.Join(stack, "/"), nil
}

// Check reads a whole tar stream (plain or gzip) and refuses unsafe entries.
func Check(r io.Reader) error {
	tr, err := Reader(r)
	if err != nil {
		return err
	}
	var c Checker
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if err := c.Check(h); err != nil {
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
// What it writes is the caller's, with the modes of the archive less the
// umask.
func Extract(r io.Reader, dir string) error {
	return extract(r, dir, nil)
}

// Owner is who owns what ExtractOwned writes.
type Owner struct{ UID, GID int }

// ExtractOwned is Extract as a container engine copies an archive in: each
// entry owned by o and with its mode exactly as the archive has it
// (permission bits only), whatever the umask. The caller must be allowed
// to give files away (root).
func ExtractOwned(r io.Reader, dir string, o Owner) error {
	return extract(r, dir, &o)
}

func extract(r io.Reader, dir string, own *Owner) error {
	tr, err := Reader(r)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var c Checker
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if err := c.Check(h); err != nil {
			return err
		}
		name := path.Clean(strings.ReplaceAll(h.Name, `\`, "/"))
		if name == "." {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		if err := makeRoom(root, name, h.Typeflag); err != nil {
			return fmt.Errorf("extract %s: %w", h.Name, err)
		}
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
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o200)
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
			continue // the linked entry's owner and mode
		default:
			continue
		}
		if own == nil {
			continue
		}
		if err := root.Lchown(name, own.UID, own.GID); err != nil {
			return fmt.Errorf("extract %s: %w", h.Name, err)
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := root.Chmod(name, mode); err != nil {
				return fmt.Errorf("extract %s: %w", h.Name, err)
			}
		}
	}
}

// makeRoom removes what is at name before an entry of type typ is written
// there, as a container engine's copy replaces it: a FIFO would hold the
// write's open, a link would lead it elsewhere, a hard link would change
// the file's other names too. As the engine's copy, it refuses to put a
// folder where something else is, or anything else where a folder is; a
// folder stays for a folder entry.
func makeRoom(root *os.Root, name string, typ byte) error {
	switch typ {
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink, tar.TypeLink:
	default:
		return nil // an entry that is skipped
	}
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir() && typ == tar.TypeDir:
		return nil
	case fi.IsDir():
		return fmt.Errorf("cannot put a non-folder where the folder %s is", name)
	case typ == tar.TypeDir:
		return fmt.Errorf("cannot put a folder where the non-folder %s is", name)
	}
	return root.Remove(name)
}

// Pack writes p (a file or a folder, walked in lexical order) to tw,
// with entry names relative to base and without owner names. Links are
// stored as links, never followed. The walk goes through base opened as a
// root (os.Root): whatever is renamed or linked in the tree meanwhile, it
// never reads outside base, and a file that became a FIFO does not hold
// it.
func Pack(tw *tar.Writer, p, base string) error {
	return PackWithout(tw, p, base, nil)
}

// PackWithout is Pack storing each folder for which skip (when set) says
// so as an empty folder.
func PackWithout(tw *tar.Writer, p, base string, skip func(dir *os.File) bool) error {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer root.Close()
	pk := packer{tw: tw, root: root, skip: skip}
	return pk.pack(filepath.ToSlash(rel), 0)
}

// PackRoot writes everything under root to tw, as Pack does with base
// root: for a caller that opened the folder itself under a root of its
// own (os.Root.OpenRoot), so no step of the path can be swapped for a link.
func PackRoot(tw *tar.Writer, root *os.Root) error {
	return packer{tw: tw, root: root}.pack(".", 0)
}

type packer struct {
	tw   *tar.Writer
	root *os.Root
	skip func(*os.File) bool
}

// maxPackDepth bounds the folders pack goes down: a folder swapped for a
// link to its parent while it walks would otherwise take it round for
// ever.
const maxPackDepth = 256

func (pk packer) pack(name string, depth int) error {
	tw, root := pk.tw, pk.root
	if depth > maxPackDepth {
		return fmt.Errorf("pack %s: folders nested deeper than %d", name, maxPackDepth)
	}
	fi, err := root.Lstat(name)
	if err != nil {
		return err
	}
	if name != "." {
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = name
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	switch {
	case fi.IsDir():
		d, err := root.Open(name)
		if err != nil {
			return err
		}
		if pk.skip != nil && pk.skip(d) {
			d.Close()
			return nil
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		slices.Sort(names)
		for _, n := range names {
			if err := pk.pack(path.Join(name, n), depth+1); err != nil {
				return err
			}
		}
	case fi.Mode().IsRegular():
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		// The header has the size Lstat saw: no more than that goes in,
		// and a file that shrank fails the archive's next write.
		_, err = io.Copy(tw, io.LimitReader(f, fi.Size()))
		return err
	}
	return nil
}
