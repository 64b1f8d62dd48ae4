package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// ErrDenied: the host refused an operation the plugin did not declare or
// the run did not grant.
var ErrDenied = errors.New("capability denied")

// HostError is a failed host operation.
type HostError struct {
	Op     string
	Status uint32
	Msg    string
}

func (e *HostError) Error() string { return fmt.Sprintf("host %s: %s", e.Op, e.Msg) }

// Unwrap makes a denied operation match ErrDenied.
func (e *HostError) Unwrap() error {
	if e.Status == abi.StatusDenied {
		return ErrDenied
	}
	return nil
}

// call sends one operation to the host and decodes its answer.
func call(op string, req, resp any) error {
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	status, out := hostCall(op, in)
	if status != abi.StatusOK {
		var e abi.Error
		if json.Unmarshal(out, &e) != nil || e.Error == "" {
			e.Error = string(out)
		}
		return &HostError{Op: op, Status: status, Msg: e.Error}
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(out, resp); err != nil {
		return fmt.Errorf("host %s: bad response: %w", op, err)
	}
	return nil
}

// Exec runs a command in the rollout's sandbox shell. A non-zero exit code
// is in the response, not an error.
func Exec(req abi.ExecRequest) (abi.ExecResponse, error) {
	var r abi.ExecResponse
	err := call(abi.OpExec, req, &r)
	return r, err
}

// ErrNotFound: the file does not exist in the sandbox.
var ErrNotFound = fs.ErrNotExist

// ReadFile reads a whole file from the sandbox. A missing file is an
// error matching ErrNotFound; a file over the host's cap (16 MiB) is an
// error matching ErrTooLarge: read such files with ReadFileHead.
func ReadFile(path string) ([]byte, error) {
	data, size, err := ReadFileHead(path, 0)
	if err != nil {
		return nil, err
	}
	if size > int64(len(data)) {
		return nil, fmt.Errorf("read %s: %d bytes: %w", path, size, ErrTooLarge)
	}
	return data, nil
}

// ReadFileHead reads at most max bytes of a file from the start (the host's
// cap when max is 0) and the file's size: size > len(data) means the rest
// was left out.
func ReadFileHead(path string, max int64) (data []byte, size int64, err error) {
	var r abi.ReadFileResponse
	if err := call(abi.OpReadFile, abi.ReadFileRequest{Path: path, MaxBytes: max}, &r); err != nil {
		return nil, 0, err
	}
	if r.Missing {
		return nil, 0, fmt.Errorf("read %s: %w", path, ErrNotFound)
	}
	if r.Size < int64(len(r.Data)) {
		r.Size = int64(len(r.Data))
	}
	return r.Data, r.Size, nil
}

// ErrTooLarge: a file is larger than what was asked for.
var ErrTooLarge = errors.New("file too large")

// WriteFile writes a file in the sandbox, creating parent folders.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	return call(abi.OpWriteFile, abi.WriteFileRequest{Path: path, Data: data, Mode: uint32(mode)}, nil)
}

// Upload extracts a tar archive into dir in the sandbox.
func Upload(dir string, tar []byte) error {
	return call(abi.OpUpload, abi.UploadRequest{Dir: dir, Tar: tar}, nil)
}

// ResetSandbox replaces the rollout's sandbox with a fresh one started from
// the same spec; later sandbox operations act on the new one. It needs the
// sandbox.reset capability.
func ResetSandbox() error {
	return call(abi.OpReset, abi.Empty{}, nil)
}

// RepoCheckout puts the repository at url, at commit, into dir in the
// sandbox, through the host's shared repository cache. It needs the
// repo.checkout capability, which the run must grant.
func RepoCheckout(url, commit, dir string) (string, error) {
	var r abi.RepoCheckoutResponse
	err := call(abi.OpRepoCheckout, abi.RepoCheckoutRequest{URL: url, Commit: commit, Dir: dir}, &r)
	return r.Commit, err
}

// ModelComplete asks the run's model for one chat completion (for judges).
// It needs the model.complete capability, which the run must grant.
func ModelComplete(req abi.ModelRequest) (abi.ModelResponse, error) {
	var r abi.ModelResponse
	err := call(abi.OpModelComplete, req, &r)
	return r, err
}

// Download returns a sandbox path as a tar archive.
func Download(path string) ([]byte, error) {
	var r abi.DownloadResponse
	err := call(abi.OpDownload, abi.DownloadRequest{Path: path}, &r)
	return r.Tar, err
}

// ReadDataset reads one page of dataset rows through the host.
func ReadDataset(req abi.DatasetRequest) (abi.DatasetResponse, error) {
	var r abi.DatasetResponse
	err := call(abi.OpDatasetRead, req, &r)
	return r, err
}

// ReadAllRows reads every row of a dataset, page by page. A row the host
// could not read (not JSON, over abi.MaxRow, a file that did not open) is
// null: EachRow says why.
func ReadAllRows(source, split string) ([]json.RawMessage, error) {
	var rows []json.RawMessage
	err := EachRow(source, split, func(_ int, row json.RawMessage, err error) error {
		if err != nil {
			row = json.RawMessage("null")
		}
		rows = append(rows, row)
		return nil
	})
	return rows, err
}

// RowError is a dataset row the host could not read: Row is its index
// (from 0), Reason names the file, the line or row, and why.
type RowError struct {
	Row    int
	Reason string
}

func (e *RowError) Error() string { return e.Reason }

// EachRow calls f with every row of a dataset in order, page by page, so
// that a plugin holds a page at a time. A row the host could not read
// comes with a nil row and a *RowError: that row is broken, the others go
// on. EachRow stops at f's first error and returns it, or the host's
// error when the dataset cannot be read at all.
func EachRow(source, split string, f func(i int, row json.RawMessage, err error) error) error {
	off := 0
	for {
		page, err := ReadDataset(abi.DatasetRequest{Source: source, Split: split, Offset: off})
		if err != nil {
			return err
		}
		bad := map[int]string{}
		for _, e := range page.Errors {
			bad[e.Row] = e.Error
		}
		for i, row := range page.Rows {
			var rowErr error
			if why, ok := bad[off+i]; ok {
				row, rowErr = nil, &RowError{Row: off + i, Reason: why}
			}
			if err := f(off+i, row, rowErr); err != nil {
				return err
			}
		}
		if page.EOF || page.Next <= off {
			return nil
		}
		off = page.Next
	}
}

// Info asks the host where the plugin runs.
func Info() (abi.HostInfo, error) {
	var r abi.HostInfo
	err := call(abi.OpHostInfo, abi.Empty{}, &r)
	return r, err
}

// Log levels.
const (
	LevelDebug = -4
	LevelInfo  = 0
	LevelWarn  = 4
	LevelError = 8
)

// Log writes a line to the host's log.
func Log(level int, msg string) { hostLog(int32(level), msg) }

// MaxSkipped is how many skipped tasks a Skips lists one by one.
const MaxSkipped = 1000

// Skips collects the tasks tasks.load skips (TasksResponse.Skipped): the
// first MaxSkipped one by one, the rest counted in one last entry, so that
// a dataset of a million rows without a task in them still answers within
// the host's bounds.
type Skips struct {
	list []abi.Skipped
	more int
}

// Add skips the task id for reason.
func (s *Skips) Add(id, reason string) {
	if len(s.list) == MaxSkipped {
		s.more++
		return
	}
	s.list = append(s.list, abi.Skipped{ID: id, Reason: reason})
}

// List is what to answer as TasksResponse.Skipped.
func (s *Skips) List() []abi.Skipped {
	if s.more == 0 {
		return s.list
	}
	return append(s.list, abi.Skipped{ID: fmt.Sprintf("(%d more)", s.more), Reason: fmt.Sprintf("%d more tasks were skipped; the first %d are listed", s.more, MaxSkipped)})
}
