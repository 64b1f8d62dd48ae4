//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// dropChild names the test a child process runs: the drops change the
// process for good, so they run in a copy of the test binary, never in
// the test's own process.
const dropChild = "PROCTOR_WARDEN_DROP_CHILD"

// TestDropOnEveryThread: dropAdmin and become hold on every thread of the
// process, those that existed before (a Go program has several before its
// main runs, and the agent's init is one the agent can reach) and those
// made after. Outside a sandbox, as root, in a child built without cgo as
// the warden is (the runtime refuses AllThreadsSyscall where cgo is
// linked).
func TestDropOnEveryThread(t *testing.T) {
	if os.Getenv(dropChild) != "" {
		t.Skip("the child runs TestDropChild")
	}
	if !holdsAdmin() {
		t.Skip("needs CAP_SYS_ADMIN to drop (run as root)")
	}
	bin := filepath.Join(t.TempDir(), "warden.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the child without cgo: %v\n%s", err, out)
	}
	for _, user := range []string{"", "65534:65534"} {
		t.Run("user="+user, func(t *testing.T) {
			cmd := exec.Command(bin, "-test.run", "^TestDropChild$", "-test.v")
			cmd.Env = append(os.Environ(), dropChild+"="+user+"/")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the child: %v\n%s", err, out)
			}
			threads := 0
			for _, line := range strings.Split(string(out), "\n") {
				if !strings.HasPrefix(line, "THREAD ") {
					continue
				}
				threads++
				f := strings.Fields(line)
				tid, capEff, capPrm, capBnd, nnp, uids := f[1], f[2], f[3], f[4], f[5], f[6]
				for name, v := range map[string]string{"CapEff": capEff, "CapPrm": capPrm, "CapBnd": capBnd} {
					if c, err := strconv.ParseUint(v, 16, 64); err != nil || c&(1<<21) != 0 {
						t.Errorf("thread %s: %s %s holds CAP_SYS_ADMIN", tid, name, v)
					}
				}
				if nnp != "1" {
					t.Errorf("thread %s: NoNewPrivs %s", tid, nnp)
				}
				want := "0,0,0,0"
				if user != "" {
					want = "65534,65534,65534,65534"
				}
				if uids != want {
					t.Errorf("thread %s: uids %s, want %s", tid, uids, want)
				}
			}
			// Those before the drop, those after, and the runtime's own.
			if threads < 7 {
				t.Errorf("the child saw %d threads:\n%s", threads, out)
			}
		})
	}
}

// TestDropChild is the child of TestDropOnEveryThread: it starts threads,
// drops, starts more, and prints what each thread holds.
func TestDropChild(t *testing.T) {
	v, ok := os.LookupEnv(dropChild)
	if !ok {
		t.Skip("run by TestDropOnEveryThread")
	}
	user, _, _ := strings.Cut(v, "/")
	hold := make(chan struct{})
	defer close(hold)
	threads := func(n int) {
		var started sync.WaitGroup
		for range n {
			started.Add(1)
			go func() {
				runtime.LockOSThread()
				started.Done()
				<-hold
			}()
		}
		started.Wait()
	}
	threads(3)
	if err := dropAdmin(); err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cred, err := credential(user)
		if err != nil {
			t.Fatal(err)
		}
		if err := become(cred); err != nil {
			t.Fatal(err)
		}
	}
	threads(3)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		st, err := taskStatus(task.Name())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("THREAD %s %s %s %s %s %s\n", task.Name(), st["CapEff"], st["CapPrm"], st["CapBnd"], st["NoNewPrivs"], strings.Join(strings.Fields(st["Uid"]), ","))
	}
}

// taskStatus reads the fields of a thread's /proc status.
func taskStatus(tid string) (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/task/" + tid + "/status")
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		st[k] = strings.TrimSpace(v)
	}
	return st, nil
}

// holdsAdmin says whether this process may drop CAP_SYS_ADMIN at all.
func holdsAdmin() bool {
	st, err := taskStatus(strconv.Itoa(syscall.Gettid()))
	if err != nil {
		return false
	}
	c, err := strconv.ParseUint(st["CapEff"], 16, 64)
	return err == nil && c&(1<<21) != 0
}
