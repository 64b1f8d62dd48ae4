package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/mount"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// wardenDirs puts the warden into containers by a read-only bind mount of
// a folder on this machine, where the engine runs here: copying 3.6 MB in
// through the archive API cost every isolated start about 40 ms (the
// engine re-executes itself to untar), and a bind mount costs nothing
// measurable. The folder holds the warden and an empty folder for the
// plugin shell's state (the warden mounts a tmpfs on it); read-only, it
// also keeps everything in the sandbox, root included, from changing the
// warden before the warden's own seal. Where the engine cannot see this
// machine's files (a remote engine, or a bind the engine refuses) the
// backend copies the warden into each container as before.
type wardenDirs struct {
	off  bool // the engine is not on this machine, or refused the bind
	mu   sync.Mutex
	dirs map[string]string // warden hash -> folder

	// The last warden hashed, its digest and its key: the embedded warden
	// is one shared slice, hashed once rather than at every start.
	last    []byte
	lastKey string
}

// mount returns the bind mount of the folder for this warden, writing it
// the first time, or false when the warden must be copied instead. Before
// every start it checks that the folder still holds what it wrote, byte
// for byte (checkWardenDir): a folder bound into sandboxes is the one file
// of this machine they all see, and a warden changed there would run as
// root in every later sandbox. A changed folder fails the start with an
// error matching sandbox.ErrTampered, which ends the run.
func (w *wardenDirs) mount(warden []byte) (mount.Mount, bool, error) {
	dir, written, err := w.folder(warden)
	if dir == "" || err != nil {
		return mount.Mount{}, false, err
	}
	if !written {
		if err := checkWardenDir(dir, warden); err != nil {
			return mount.Mount{}, false, err
		}
	}
	return mount.Mount{Type: mount.TypeBind, Source: dir, Target: shell.WardenDir, ReadOnly: true}, true, nil
}

// folder is the folder of this warden, written now (written) where it was
// not there; "" when the warden must be copied.
func (w *wardenDirs) folder(warden []byte) (dir string, written bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		return "", false, nil
	}
	if len(warden) == 0 || len(w.last) != len(warden) || &w.last[0] != &warden[0] {
		sum := sha256.Sum256(warden)
		w.lastKey = hex.EncodeToString(sum[:12])
		w.last = warden
	}
	dir, ok := w.dirs[w.lastKey]
	if _, err := os.Lstat(dir); ok && !errors.Is(err, fs.ErrNotExist) {
		return dir, false, nil
	}
	// Not written yet, or removed (as a changed folder's error says to).
	if dir, err = writeWardenDir(w.lastKey, warden); err != nil {
		if errors.Is(err, sandbox.ErrTampered) {
			return "", false, err
		}
		w.off = true
		return "", false, nil
	}
	if w.dirs == nil {
		w.dirs = map[string]string{}
	}
	w.dirs[w.lastKey] = dir
	return dir, true, nil
}

// disable makes later starts copy the warden.
func (w *wardenDirs) disable() {
	w.mu.Lock()
	w.off = true
	w.mu.Unlock()
}

// The names in the warden's folder, and their modes.
var (
	wardenName = filepath.Base(shell.WardenPath)
	stateName  = filepath.Base(pluginState)
)

const (
	wardenDirMode   = 0o755
	wardenFileMode  = 0o755
	wardenStateMode = 0o700
)

// writeWardenDir lays out the folder under the user's cache, named by the
// warden's hash, and renames it into place whole, so a folder that exists
// is complete (another proctor may have written it first). A folder that
// exists but holds anything else is an error matching ErrTampered.
func writeWardenDir(key string, warden []byte) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	root := filepath.Join(cache, "proctor", "warden")
	dir := filepath.Join(root, key)
	if _, err := os.Lstat(dir); err == nil {
		return dir, checkWardenDir(dir, warden)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, wardenDirMode); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, wardenName), warden, wardenFileMode); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(tmp, wardenName), wardenFileMode); err != nil { // whatever the umask
		return "", err
	}
	if err := os.Mkdir(filepath.Join(tmp, stateName), wardenStateMode); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(tmp, stateName), wardenStateMode); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Lstat(dir); serr == nil {
			return dir, checkWardenDir(dir, warden)
		}
		return "", err
	}
	return dir, nil
}

// checkWardenDir checks that dir holds exactly what writeWardenDir wrote:
// the warden, with its mode, compared byte for byte with the one this
// proctor holds (its SHA-256 names the folder), and the empty state
// folder; nothing else, and no link. It reads the warden whole: about
// 1 ms of a core (BenchmarkWardenCheck).
func checkWardenDir(dir string, warden []byte) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return tampered(dir, dir, fmt.Sprintf("cannot be read: %v", err))
	}
	if !st.IsDir() || st.Mode().Perm() != wardenDirMode {
		return tampered(dir, dir, fmt.Sprintf("is %v, not a folder of mode %o", st.Mode(), wardenDirMode))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return tampered(dir, dir, fmt.Sprintf("cannot be read: %v", err))
	}
	if len(ents) != 2 {
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = e.Name()
		}
		return tampered(dir, dir, fmt.Sprintf("holds %q, not only %q and %q", names, wardenName, stateName))
	}
	if err := checkWarden(dir, warden); err != nil {
		return err
	}
	state := filepath.Join(dir, stateName)
	if st, err := os.Lstat(state); err != nil || !st.IsDir() || st.Mode().Perm() != wardenStateMode {
		return tampered(dir, state, fmt.Sprintf("is not an empty folder of mode %o (%v)", wardenStateMode, err))
	}
	if inside, err := os.ReadDir(state); err != nil || len(inside) != 0 {
		return tampered(dir, state, fmt.Sprintf("is not empty (%d entries, %v)", len(inside), err))
	}
	return nil
}

// checkWarden checks the warden file of dir.
func checkWarden(dir string, want []byte) error {
	p := filepath.Join(dir, wardenName)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return tampered(dir, p, fmt.Sprintf("cannot be opened: %v", err))
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return tampered(dir, p, err.Error())
	case !st.Mode().IsRegular() || st.Mode().Perm() != wardenFileMode:
		return tampered(dir, p, fmt.Sprintf("is %v, not a file of mode %o", st.Mode(), wardenFileMode))
	case st.Size() != int64(len(want)):
		return tampered(dir, p, fmt.Sprintf("has %d bytes, not %d", st.Size(), len(want)))
	}
	if err := sameBytes(f, want); err != nil {
		return tampered(dir, p, err.Error())
	}
	return nil
}

// sameBytes compares what r holds with want, a chunk at a time.
func sameBytes(r io.Reader, want []byte) error {
	buf := make([]byte, 64<<10)
	off := 0
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if off+n > len(want) || !bytes.Equal(buf[:n], want[off:off+n]) {
				return fmt.Errorf("differs from the warden proctor wrote from byte %d on", off)
			}
			off += n
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if off != len(want) {
		return fmt.Errorf("has %d bytes, not %d", off, len(want))
	}
	return nil
}

// tampered is the error of a warden's folder dir that is not as written:
// file (dir or a file in it) is what.
func tampered(dir, file, what string) error {
	return fmt.Errorf("%w: %s %s; every sandbox binds %s, so none starts from it: remove the folder (proctor writes it again) and find out what changed it",
		sandbox.ErrTampered, file, what, dir)
}

// localEngine reports whether the engine's address is a socket on this
// machine, whose files it can then bind.
func localEngine(host string) bool {
	return strings.HasPrefix(host, "unix://")
}

// bindRefused reports whether a create failed on the warden's bind mount.
func bindRefused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "bind source path")
}
