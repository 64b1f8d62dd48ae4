// Package ocitest starts a real OCI registry (the distribution registry,
// Debian's docker-registry package) on 127.0.0.1 for tests.
package ocitest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is a running registry.
type Registry struct {
	Addr string // host:port
	Root string // its storage folder
	cmd  *exec.Cmd
}

// Start runs a registry for the test's duration. Without the binary the
// test is skipped, unless PROCTOR_REQUIRE_DOCKER=1 (CI), where it fails.
func Start(t testing.TB) *Registry {
	t.Helper()
	return start(t, "")
}

// StartWithAuth runs a registry that wants user and password (htpasswd).
func StartWithAuth(t testing.TB, user, password string) *Registry {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "htpasswd")
	os.WriteFile(file, []byte(user+":"+string(hash)+"\n"), 0o644)
	return start(t, fmt.Sprintf("auth:\n  htpasswd:\n    realm: proctor-test\n    path: %s\n", file))
}

func start(t testing.TB, extra string) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("PROCTOR_REQUIRE_DOCKER") == "1" {
			t.Fatal("docker-registry is not installed: run `make test-tools` (scripts/test-tools.sh), or apt-get install docker-registry")
		}
		t.Skip("docker-registry is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	root := filepath.Join(dir, "storage")
	os.WriteFile(cfg, []byte(fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", root, addr)+extra), 0o644)
	r := &Registry{Addr: addr, Root: root}
	r.cmd = exec.Command(bin, "serve", cfg)
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 || resp.StatusCode == 401 && extra != "" {
				return r
			}
		}
		if i > 200 {
			t.Fatalf("registry on %s did not come up: %v", addr, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Stop stops the registry (the "registry down" case); safe to call twice.
func (r *Registry) Stop() {
	if r.cmd.Process != nil && r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// Blob is the storage file of a blob digest ("sha256:...").
func (r *Registry) Blob(digest string) string {
	hex := digest[len("sha256:"):]
	return filepath.Join(r.Root, "docker", "registry", "v2", "blobs", "sha256", hex[:2], hex, "data")
}
