//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/proctor-dev/proctor/sandbox/mux"
)

// noNetwork finishes a container whose network the host turned off at the
// engine (Config.NetworkDisabled): the engine then skips its network
// sandbox, and with it a hook that re-executes the engine's binary on
// every start, but also the /etc/hosts it would write. It checks that the
// container's network namespace has no interface but the loopback (so an
// engine that put the container anywhere else fails the sandbox instead of
// giving the agent a network) and writes the hosts file the engine writes
// for network "none", so "localhost" resolves as it does there.
func noNetwork() error {
	f, err := os.Open("/proc/net/dev")
	if err != nil {
		return fmt.Errorf("network off: read the interfaces: %w", err)
	}
	names, err := interfaces(io.LimitReader(f, 1<<20))
	f.Close()
	if err != nil {
		return fmt.Errorf("network off: read the interfaces: %w", err)
	}
	for _, n := range names {
		if n != "lo" {
			return fmt.Errorf("%s the interfaces %v", mux.NetworkNotOff, names)
		}
	}
	return writeHosts("/etc/hosts")
}

// interfaces lists the interface names of a /proc/net/dev table.
func interfaces(r io.Reader) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(r)
	for line := 0; sc.Scan(); line++ {
		if line < 2 { // the two header lines
			continue
		}
		name, _, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			return nil, fmt.Errorf("line %d of /proc/net/dev has no name", line+1)
		}
		names = append(names, strings.TrimSpace(name))
	}
	return names, sc.Err()
}

// writeHosts replaces path (the image's file, a link or nothing) with the
// loopback hosts file, as the engine's bind mount would hide it.
func writeHosts(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("network off: replace %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("network off: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("network off: write %s: %w", path, err)
	}
	if _, err := f.WriteString(mux.LoopbackHosts); err != nil {
		f.Close()
		return fmt.Errorf("network off: write %s: %w", path, err)
	}
	return f.Close()
}
