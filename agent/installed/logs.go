package installed

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// Logs is a rollout's agent logs, a tar in a temporary file of at most
// max bytes of content: the gateway's exchanges (gateway.jsonl), the
// CLI's output (stdout.txt, stderr.txt, each cut to 1 MiB around the
// middle), and the CLI's own log files under files/ (as far as the cap
// leaves room; truncated.txt lists what it left out).
type Logs struct {
	gateway *os.File // the gateway writes its exchanges here
	tar     *os.File
	max     int64
}

func newLogs(dir string, max int64) (*Logs, error) {
	g, err := os.CreateTemp(dir, "proctor-gateway-*.jsonl")
	if err != nil {
		return nil, err
	}
	t, err := os.CreateTemp(dir, "proctor-agent-logs-*.tar")
	if err != nil {
		g.Close()
		os.Remove(g.Name())
		return nil, err
	}
	return &Logs{gateway: g, tar: t, max: max}, nil
}

// add writes the tar: the gateway's log, the CLI's output, and the log
// files at paths in sb.
func (l *Logs) add(ctx context.Context, sb sandbox.Sandbox, exec execResult, paths []string, home string) {
	tw := tar.NewWriter(l.tar)
	defer tw.Close()
	left := l.max
	var skipped []string
	put := func(name string, r io.Reader, size int64, mode int64) {
		if size > left {
			skipped = append(skipped, name)
			return
		}
		if tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: size, ModTime: time.Now(), Typeflag: tar.TypeReg}) == nil {
			io.CopyN(tw, r, size)
			left -= size
		}
	}
	if fi, err := l.gateway.Stat(); err == nil {
		l.gateway.Seek(0, io.SeekStart)
		put("gateway.jsonl", l.gateway, fi.Size(), 0o644)
	}
	put("stdout.txt", strings.NewReader(exec.Stdout), int64(len(exec.Stdout)), 0o644)
	put("stderr.txt", strings.NewReader(exec.Stderr), int64(len(exec.Stderr)), 0o644)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for _, p := range paths {
		full := expandHome(p, home)
		rc, err := sb.Download(dctx, full)
		if err != nil {
			continue // not written, or gone with the CLI
		}
		prefix := "files" + path.Dir(path.Clean("/"+full)) + "/"
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			name := path.Clean("/" + h.Name)
			if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "..") {
				continue
			}
			put(strings.TrimSuffix(prefix, "/")+name, tr, h.Size, h.Mode&0o777)
		}
		rc.Close()
	}
	if len(skipped) > 0 {
		note := "left out, over the cap on an agent's logs:\n" + strings.Join(skipped, "\n") + "\n"
		tw.WriteHeader(&tar.Header{Name: "truncated.txt", Mode: 0o644, Size: int64(len(note)), ModTime: time.Now(), Typeflag: tar.TypeReg})
		io.WriteString(tw, note)
	}
}

// Read returns the tar to read from its start.
func (l *Logs) Read(p []byte) (int, error) { return l.tar.Read(p) }

// Rewind goes back to the tar's start.
func (l *Logs) Rewind() error {
	_, err := l.tar.Seek(0, io.SeekStart)
	return err
}

// Close removes the temporary files.
func (l *Logs) Close() error {
	for _, f := range []*os.File{l.gateway, l.tar} {
		f.Close()
		os.Remove(f.Name())
	}
	return nil
}
