package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/mount"

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

	// The last warden hashed and its key: the embedded warden is one
	// shared slice, hashed once rather than at every start.
	last    []byte
	lastKey string
}

// mount returns the bind mount of the folder for this warden, writing it
// the first time, or false when the warden must be copied instead.
func (w *wardenDirs) mount(warden []byte) (mount.Mount, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off {
		return mount.Mount{}, false
	}
	key := w.lastKey
	if len(warden) == 0 || len(w.last) != len(warden) || &w.last[0] != &warden[0] {
		sum := sha256.Sum256(warden)
		key = hex.EncodeToString(sum[:12])
		w.last, w.lastKey = warden, key
	}
	dir, ok := w.dirs[key]
	if !ok {
		var err error
		if dir, err = writeWardenDir(key, warden); err != nil {
			w.off = true
			return mount.Mount{}, false
		}
		if w.dirs == nil {
			w.dirs = map[string]string{}
		}
		w.dirs[key] = dir
	}
	return mount.Mount{Type: mount.TypeBind, Source: dir, Target: shell.WardenDir, ReadOnly: true}, true
}

// disable makes later starts copy the warden.
func (w *wardenDirs) disable() {
	w.mu.Lock()
	w.off = true
	w.mu.Unlock()
}

// writeWardenDir lays out the folder under the user's cache, named by the
// warden's hash, and renames it into place whole, so a folder that exists
// is complete (another proctor may have written it first).
func writeWardenDir(key string, warden []byte) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	root := filepath.Join(cache, "proctor", "warden")
	dir := filepath.Join(root, key)
	if ok, err := wardenDirOK(dir, warden); ok || err != nil {
		return dir, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, filepath.Base(shell.WardenPath)), warden, 0o755); err != nil {
		return "", err
	}
	if err := os.Mkdir(filepath.Join(tmp, filepath.Base(pluginState)), 0o700); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if ok, _ := wardenDirOK(dir, warden); ok {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

// wardenDirOK reports whether dir already holds this warden, unchanged.
func wardenDirOK(dir string, warden []byte) (bool, error) {
	got, err := os.ReadFile(filepath.Join(dir, filepath.Base(shell.WardenPath)))
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if string(got) != string(warden) {
		return false, fmt.Errorf("%s holds another warden than its name says: remove the folder", dir)
	}
	return true, nil
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
