package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
)

// ReportMedian adds the median of per-op durations in milliseconds as
// unit (a mean, ns/op, is what one slow outlier on a shared machine skews).
func ReportMedian(b *testing.B, d []time.Duration, unit string) {
	if len(d) == 0 {
		return
	}
	d = slices.Clone(d)
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/1e6, unit)
}

// DockerExec runs commands in container ID the way harnesses that shell
// out per command do: `docker exec [-w DIR] [-e K=V]... ID bash -c CMD`,
// stderr merged into stdout. It is the baseline of the benchmarks that
// price a step of proctor's agents against their references' way.
type DockerExec struct{ ID string }

// Exec runs cmd with the options a docker exec has: directory and
// variables; Fresh is what docker exec always is.
func (d DockerExec) Exec(ctx context.Context, cmd string, o sandbox.ExecOptions) (sandbox.ExecResult, error) {
	args := []string{"exec"}
	if o.Workdir != "" {
		args = append(args, "-w", o.Workdir)
	}
	for k, v := range o.Env {
		args = append(args, "-e", k+"="+v)
	}
	c := exec.CommandContext(ctx, "docker", append(args, d.ID, "bash", "-c", cmd)...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return sandbox.ExecResult{Stdout: out.String(), ExitCode: ee.ExitCode()}, nil
	}
	return sandbox.ExecResult{Stdout: out.String()}, err
}

func (DockerExec) ReadFile(context.Context, string, int64) ([]byte, int64, error) {
	return nil, 0, errors.New("DockerExec reads no files")
}

func (DockerExec) WriteFile(context.Context, string, []byte, fs.FileMode) error {
	return errors.New("DockerExec writes no files")
}
