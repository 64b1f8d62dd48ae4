package terminus

import (
	"context"
	"fmt"

	"github.com/proctor-dev/proctor/agent/pystr"
)

// Tmux is where tmux comes from when the sandbox's image has none. Harbor
// installs the image's own package then (apt-get, apk, ...: terminus_2's
// tmux_session.py, _attempt_tmux_installation); a sandbox here has no
// network, so proctor brings a static tmux: Dir is a folder in the sandbox
// that holds one (the docker backend binds it in read-only), and Binary,
// when set, gives its bytes to write into the sandbox when Dir has none
// (backends that cannot bind a folder of this machine).
type Tmux struct {
	Dir    string
	Binary func() ([]byte, error)
}

// uploadPath is where Binary's tmux is written in the sandbox.
const uploadPath = "/tmp/.proctor-tmux/tmux"

// ensure returns how the session's commands name tmux: "tmux" when the
// image has it, else proctor's, linked into /usr/local/bin as Harbor's
// source build installs it (or named by its path when that folder is not
// writable). It also makes the log folder (/logs/agent, which Harbor
// mounts), where Terminus-2 writes the pane's log and the recording.
func (t Tmux) ensure(ctx context.Context, s *session) (string, error) {
	if _, _, err := s.run(ctx, "mkdir -p "+pystr.Quote(s.logDir)+" 2>/dev/null"); err != nil {
		return "", err
	}
	if _, rc, err := s.run(ctx, "tmux -V"); err != nil || rc == 0 {
		return "tmux", err
	}
	path := ""
	if t.Dir != "" {
		p := t.Dir + "/tmux"
		if _, rc, err := s.run(ctx, "test -x "+pystr.Quote(p)); err != nil {
			return "", err
		} else if rc == 0 {
			path = p
		}
	}
	if path == "" && t.Binary != nil {
		b, err := t.Binary()
		if err != nil {
			return "", err
		}
		if err := s.sh.WriteFile(ctx, uploadPath, b, 0o755); err != nil {
			return "", fmt.Errorf("write tmux into the sandbox: %w", err)
		}
		path = uploadPath
	}
	if path == "" {
		return "", fmt.Errorf("the sandbox's image has no tmux and proctor has no static tmux to bring in: build it once with `make tmux`")
	}
	if _, _, err := s.run(ctx, "ln -s "+pystr.Quote(path)+" /usr/local/bin/tmux 2>/dev/null"); err != nil {
		return "", err
	}
	if _, rc, err := s.run(ctx, "tmux -V"); err != nil || rc == 0 {
		return "tmux", err
	}
	return pystr.Quote(path), nil
}
