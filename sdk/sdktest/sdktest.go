//go:build !wasip1

// Package sdktest runs a plugin's hooks natively, with plain `go test`,
// against an emulated host: sandbox operations act on a temporary folder
// through bash on this machine, datasets are read from files. It uses only
// the standard library. Every hook still goes through the same JSON
// encoding as under the real host.
package sdktest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Host is an emulated proctor host. Root stands for the sandbox's "/":
// absolute paths in operations are mapped under it, and commands run with
// $ROOT set to it and their working directory at Root+Workdir.
type Host struct {
	Root    string
	Workdir string
	// Datasets maps dataset.read sources to rows; BadRows names rows of
	// them the emulated host could not read (served as null, with the
	// reason), by source and row.
	Datasets map[string][]json.RawMessage
	BadRows  map[string]map[int]string
	// Model answers model.complete; nil refuses it.
	Model func(abi.ModelRequest) (abi.ModelResponse, error)
	// Reset emulates sandbox.reset: it gets the host with a new, empty Root
	// to fill as the sandbox's image would be. Nil refuses the operation.
	Reset func(h *Host) error
	// Calls records the operations the plugin made, in order.
	Calls []string

	tempDir func() string
}

// New installs an emulated host for the test's duration.
func New(t testing.TB) *Host {
	h := &Host{Root: t.TempDir(), Workdir: "/", Datasets: map[string][]json.RawMessage{}, tempDir: t.TempDir}
	restore := sdk.SetHost(h.call)
	t.Cleanup(restore)
	return h
}

// checkout emulates repo.checkout with a plain clone of the local
// repository r.URL.
func (h *Host) checkout(r abi.RepoCheckoutRequest) (abi.RepoCheckoutResponse, error) {
	tmp, err := os.MkdirTemp("", "sdktest-clone-*")
	if err != nil {
		return abi.RepoCheckoutResponse{}, err
	}
	defer os.RemoveAll(tmp)
	dst := h.Path(r.Dir)
	script := `set -e; git clone -q --no-checkout -- "$1" "$2" && cd "$2" && git rev-parse --verify -q "$3^{commit}" && git archive "$3" | (mkdir -p "$4" && tar -x -C "$4")`
	out, err := exec.Command("bash", "-c", script, "checkout", r.URL, tmp, r.Commit, dst).Output()
	if err != nil {
		return abi.RepoCheckoutResponse{}, fmt.Errorf("repo.checkout %s at %s: %v", r.URL, r.Commit, err)
	}
	return abi.RepoCheckoutResponse{Commit: strings.TrimSpace(string(out))}, nil
}

// Path maps a sandbox path to the emulator's folder.
func (h *Host) Path(p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(h.Workdir, p)
	}
	return filepath.Join(h.Root, filepath.Clean("/"+p))
}

// Call runs one hook with in as input and decodes the output into out.
func Call(method string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	status, res := sdk.Handle(method, b)
	if status != abi.StatusOK {
		var e abi.Error
		json.Unmarshal(res, &e)
		return &Error{Method: method, Status: status, Class: e.Class, Msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(res, out)
}

// Error is a hook that did not answer StatusOK: its status, and the class
// and message of its abi.Error.
type Error struct {
	Method string
	Status uint32
	Class  string
	Msg    string
}

func (e *Error) Error() string {
	if e.Class != "" {
		return fmt.Sprintf("%s: status %d (class %s): %s", e.Method, e.Status, e.Class, e.Msg)
	}
	return fmt.Sprintf("%s: status %d: %s", e.Method, e.Status, e.Msg)
}

func reply(v any, err error) (uint32, []byte) {
	if err != nil {
		b, _ := json.Marshal(abi.Error{Error: err.Error()})
		return abi.StatusError, b
	}
	b, _ := json.Marshal(v)
	return abi.StatusOK, b
}

func (h *Host) call(op string, req []byte) (uint32, []byte) {
	h.Calls = append(h.Calls, op)
	switch op {
	case abi.OpExec:
		var r abi.ExecRequest
		json.Unmarshal(req, &r)
		return reply(h.exec(r))
	case abi.OpReadFile:
		var r abi.ReadFileRequest
		json.Unmarshal(req, &r)
		b, err := os.ReadFile(h.Path(r.Path))
		if errors.Is(err, os.ErrNotExist) {
			return reply(abi.ReadFileResponse{Missing: true}, nil)
		}
		// The real host's cap, so a plugin's tests see what it will.
		max := r.MaxBytes
		if max <= 0 || max > abi.MaxReadFile {
			max = abi.MaxReadFile
		}
		size := int64(len(b))
		if size > max {
			return reply(abi.ReadFileResponse{Data: b[:max], Size: size, Truncated: true}, err)
		}
		return reply(abi.ReadFileResponse{Data: b, Size: size}, err)
	case abi.OpWriteFile:
		var r abi.WriteFileRequest
		json.Unmarshal(req, &r)
		p := h.Path(r.Path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		mode := os.FileMode(r.Mode)
		if mode == 0 {
			mode = 0o644
		}
		return reply(abi.Empty{}, os.WriteFile(p, r.Data, mode))
	case abi.OpUpload:
		var r abi.UploadRequest
		json.Unmarshal(req, &r)
		return reply(abi.Empty{}, h.untar(h.Path(r.Dir), r.Tar))
	case abi.OpDatasetRead:
		var r abi.DatasetRequest
		json.Unmarshal(req, &r)
		rows, ok := h.Datasets[r.Source]
		if !ok {
			return reply(nil, fmt.Errorf("dataset %s: not in the emulator's Datasets", r.Source))
		}
		resp := abi.DatasetResponse{Rows: append([]json.RawMessage(nil), rows...), Next: len(rows), EOF: true}
		for i, why := range h.BadRows[r.Source] {
			if i < len(rows) {
				resp.Rows[i] = json.RawMessage("null")
				resp.Errors = append(resp.Errors, abi.RowError{Row: i, Error: why})
			}
		}
		return reply(resp, nil)
	case abi.OpModelComplete:
		if h.Model == nil {
			break
		}
		var r abi.ModelRequest
		json.Unmarshal(req, &r)
		return reply(h.Model(r))
	case abi.OpRepoCheckout:
		var r abi.RepoCheckoutRequest
		json.Unmarshal(req, &r)
		return reply(h.checkout(r))
	case abi.OpReset:
		if h.Reset == nil {
			break
		}
		h.Root = h.tempDir()
		return reply(abi.Empty{}, h.Reset(h))
	case abi.OpHostInfo:
		return reply(abi.HostInfo{ProctorVersion: "sdktest", ABI: abi.Version, ABIMinor: abi.Minor,
			Features: append(abi.Hooks(), abi.Ops()...), Backend: "emulator"}, nil)
	}
	b, _ := json.Marshal(abi.Error{Error: "the emulator does not implement " + op})
	return abi.StatusUnknown, b
}

func (h *Host) exec(r abi.ExecRequest) (abi.ExecResponse, error) {
	// Absolute paths in the command refer to the sandbox: run it with the
	// common top-level folders rebased under Root.
	var pairs []string
	for _, dir := range []string{"/logs", "/tests", "/solution", "/tmp", "/app", "/work", "/testbed", "/srv"} {
		for _, before := range []string{" ", "(", ">", "="} {
			pairs = append(pairs, before+dir, before+h.Root+dir)
		}
	}
	cmd := strings.NewReplacer(pairs...).Replace(r.Cmd)
	c := exec.Command("bash", "-c", cmd)
	wd := h.Path(r.Workdir)
	if r.Workdir == "" {
		wd = h.Path(h.Workdir)
	}
	os.MkdirAll(wd, 0o755)
	c.Dir = wd
	c.Env = append(os.Environ(), "ROOT="+h.Root)
	for k, v := range r.Env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Stdin = bytes.NewReader(r.Stdin)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	if err := c.Start(); err != nil {
		return abi.ExecResponse{}, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	timedOut := false
	var timeout <-chan time.Time
	if r.TimeoutMs > 0 {
		timeout = time.After(time.Duration(r.TimeoutMs) * time.Millisecond)
	}
	select {
	case <-done:
	case <-timeout:
		c.Process.Kill()
		<-done
		timedOut = true
	}
	return abi.ExecResponse{Stdout: out.String(), Stderr: errb.String(), ExitCode: c.ProcessState.ExitCode(),
		TimedOut: timedOut, DurationMs: time.Since(start).Milliseconds()}, nil
}

func (h *Host) untar(dir string, data []byte) error {
	var r io.Reader = bytes.NewReader(data)
	if len(data) > 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+hd.Name))
		switch hd.Typeflag {
		case tar.TypeDir:
			os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(p, b, os.FileMode(hd.Mode)|0o200); err != nil {
				return err
			}
		}
	}
}
