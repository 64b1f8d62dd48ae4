package local

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Caps{}, func(t *testing.T) sandbox.Sandbox {
		sb, err := Backend{}.Start(context.Background(), sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Close(context.Background()) })
		return sb
	})
}

func TestWorkdirAndRelativePaths(t *testing.T) {
	ctx := context.Background()
	for _, wd := range []string{"", "/app", "proj/sub", "../../escape"} {
		sb, err := Backend{}.Start(ctx, sandbox.Spec{Workdir: wd})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(ctx)
		root := sb.(*Sandbox).Root()
		r, err := sb.Exec(ctx, "pwd", sandbox.ExecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.Stdout, root+"/work") {
			t.Errorf("workdir %q: shell starts in %q, outside %s/work", wd, r.Stdout, root)
		}
		if err := sb.WriteFile(ctx, "f.txt", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if r, _ := sb.Exec(ctx, "cat f.txt", sandbox.ExecOptions{}); r.Stdout != "x" {
			t.Errorf("workdir %q: relative WriteFile not where the shell starts: %+v", wd, r)
		}
	}
}

func TestCloseKillsEveryProcess(t *testing.T) {
	ctx := context.Background()
	b, err := Backend{}.Start(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	sb := b.(*Sandbox)
	// One child leaves the command's group with setsid.
	if _, err := sb.Exec(ctx, "sleep 321 & setsid sleep 322 & echo ok", sandbox.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := sb.groups(); len(g) < 2 {
		t.Fatalf("want the shell's and the commands' groups, found %v", g)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sb.groups()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := sb.groups(); len(g) > 0 {
		t.Fatalf("processes left after Close in groups %v", g)
	}
	if _, err := os.Stat(sb.Root()); !os.IsNotExist(err) {
		t.Fatalf("sandbox folder left: %v", err)
	}
}
