package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// run executes a command in /testbed and fails with class on a non-zero
// exit, with the output's tail.
func run(class, what, cmd string, timeoutMs int64) (abi.ExecResponse, error) {
	return runIn("/testbed", class, what, cmd, timeoutMs)
}

// runIn is run in another folder.
func runIn(dir, class, what, cmd string, timeoutMs int64) (abi.ExecResponse, error) {
	res, err := sdk.Exec(abi.ExecRequest{Cmd: cmd, Workdir: dir, TimeoutMs: timeoutMs})
	if err != nil {
		return res, err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return res, sdk.Errorf(class, "%s: exit %d: %s", what, res.ExitCode, tail(res.Stdout+res.Stderr, 2000))
	}
	return res, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, " ")
}

// lines splits command output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// testFiles are the files of Python test ids ("path.py::name").
func testFiles(ids []string) []string {
	var files []string
	for _, t := range ids {
		f, _, found := strings.Cut(t, "::")
		if !found && !strings.HasSuffix(f, ".py") {
			continue // a Go test name, not a file
		}
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	return files
}

// patchPaths are the files a unified diff touches.
func patchPaths(patch string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(patch, "\n") {
		if rest, ok := strings.CutPrefix(line, "diff --git a/"); ok {
			if a, b, ok := strings.Cut(rest, " b/"); ok {
				out[a], out[b] = true, true
			}
		}
	}
	return out
}

const setupMs = 120000

// prepare brings /testbed to the instance's bugged state: the checkout at
// ref (clone mode; an image's must be clean at setup), then the bug patch
// where the checkout does not have it yet, and no compiled bytecode (a
// .pyc holds the code of a test file and can stand in for it).
func prepare(c Config, in Instance, ref string, grading bool) error {
	if in.Mode == modeClone {
		if err := checkout(c, in, ref, "/testbed"); err != nil {
			return err
		}
		if c.InstallCmd != "" {
			if _, err := run("setup", "install_cmd", c.InstallCmd, c.TestTimeout.ms()); err != nil {
				return err
			}
		}
	} else if !grading {
		if _, err := run("setup", "check the checkout", "git status --porcelain --untracked-files=no | grep -q . && { echo 'the image has uncommitted changes at /testbed'; exit 1; }; exit 0", setupMs); err != nil {
			return err
		}
	}
	if in.Patch != "" {
		if err := applyBug(in); err != nil {
			return err
		}
	}
	_, err := run("setup", "remove compiled bytecode", `find . -name __pycache__ -prune -exec rm -rf {} + ; find . -name '*.py[co]' -delete`, setupMs)
	return err
}

// checkout puts the repository at ref into dir through the host's
// repository cache.
func checkout(c Config, in Instance, ref, dir string) error {
	url := strings.ReplaceAll(c.RepoURL, "{repo}", in.Repo)
	if _, err := sdk.RepoCheckout(url, ref, dir); err != nil {
		var he *sdk.HostError
		if errors.As(err, &he) && he.Status == abi.StatusDenied {
			return sdk.Errorf("setup", "instance %s needs clone mode: add \"repo.checkout\" to [env] grants", in.ID)
		}
		return sdk.Errorf("setup", "instance %s: check out %s at %s: %v", in.ID, url, ref, err)
	}
	return nil
}

// failingTests finds the files of the FAIL_TO_PASS tests in the checkout
// at dir: the listed files (pytest ids), the modules unittest-style ids
// name, or the _test.go files that define the tests (Go). gone is set
// when some are not there, as at the end of a SWE-smith instance branch,
// whose last commit removed them.
func failingTests(in Instance, dir string) (files []string, gone bool, err error) {
	if isGo(in) {
		var names []string
		for _, id := range in.FailToPass {
			name, _, _ := strings.Cut(id, "/")
			if name = regexp.QuoteMeta(name); !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		res, err := runIn(dir, "setup", "find the Go tests", "grep -rlE --include='*_test.go' "+quote(`^func (`+strings.Join(names, "|")+`)\(`)+" . || true", setupMs)
		if err != nil {
			return nil, false, err
		}
		files = lines(res.Stdout)
		return files, len(files) == 0, nil
	}
	listed := testFiles(in.FailToPass)
	var modules [][]string
	all := slices.Clone(listed)
	for _, id := range in.FailToPass {
		if c := unittestFiles(id); c != nil {
			modules = append(modules, c)
			all = append(all, c...)
		}
	}
	res, err := runIn(dir, "setup", "look for the tests", "for f in "+quoteAll(all)+`; do [ -e "$f" ] && printf '%s\n' "$f"; done; true`, setupMs)
	if err != nil {
		return nil, false, err
	}
	exists := lines(res.Stdout)
	for _, f := range listed {
		if slices.Contains(exists, f) {
			files = append(files, f)
		} else {
			gone = true
		}
	}
	for _, cands := range modules {
		i := slices.IndexFunc(cands, func(f string) bool { return slices.Contains(exists, f) })
		switch {
		case i < 0:
			gone = true
		case !slices.Contains(files, cands[i]):
			files = append(files, cands[i])
		}
	}
	return files, gone, nil
}

// pyIdent is a Python identifier as unittest's ids spell modules.
var pyIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// unittestFiles are the files a unittest-style test id, "test_y
// (pkg.test_mod.TestX)" or, since Python 3.11, "test_y
// (pkg.test_mod.TestX.test_y)", can live in, the longest module path
// first: pkg/test_mod/TestX.py, pkg/test_mod.py, pkg.py. Nil for any
// other id.
func unittestFiles(id string) []string {
	open := strings.LastIndex(id, " (")
	if pytestID(id) || open < 0 || !strings.HasSuffix(id, ")") {
		return nil
	}
	parts := strings.Split(id[open+2:len(id)-1], ".")
	var out []string
	for k := len(parts); k >= 1; k-- {
		if !pyIdent.MatchString(parts[k-1]) {
			return nil
		}
		out = append(out, strings.Join(parts[:k], "/")+".py")
	}
	return out
}

// applyBug brings the checkout to the bugged state with the instance's
// patch, unless the checkout has it already (a base_commit with the bug
// applied, as SWE-smith records it).
func applyBug(in Instance) error {
	if err := sdk.WriteFile("/tmp/.proctor-bug.patch", []byte(in.Patch), 0o600); err != nil {
		return err
	}
	where := in.Image
	if in.Mode == modeClone {
		where = in.Repo + "@" + in.ref()
	}
	_, err := run("setup", fmt.Sprintf("instance %s: the bug patch does not apply to %s", in.ID, where),
		`p=/tmp/.proctor-bug.patch; if git apply --check --whitespace=nowarn $p 2>/dev/null; then git apply --whitespace=nowarn $p; rc=$?; `+
			`elif git apply -R --check $p 2>/dev/null; then rc=0; else git apply --check $p; rc=1; fi; rm -f $p; exit $rc`, setupMs)
	return err
}

// Setup prepares the agent's checkout: bugged, with the FAIL_TO_PASS test
// files gone and a history that starts here, so `git diff` and `git log`
// show neither the bug nor the tests. It remembers, out of the agent's
// reach, the commit the history starts from, the names at the top of the
// checkout, and the commit grading checks out: ref, or the one before it
// when ref's commit removed the failing tests.
func (e *env) Setup(r abi.RolloutRequest) error {
	in, c, err := instance(r)
	if err != nil {
		return err
	}
	if err := prepare(c, in, in.ref(), false); err != nil {
		return err
	}
	hide, gone, err := failingTests(in, "/testbed")
	if err != nil {
		return err
	}
	e.gradeRef, e.hidden = in.ref(), hide
	if gone && in.Mode == modeClone {
		e.gradeRef += "~1"
	}
	rm := ""
	if len(hide) > 0 {
		rm = "rm -f -- " + quoteAll(hide) + " && "
	}
	res, err := run("setup", "hide the failing tests and restart the history", rm+
		"rm -rf .git && git init -q && git add -A && git -c user.name=proctor -c user.email=proctor@localhost commit -qm initial --no-verify && "+
		"git rev-parse HEAD && git ls-tree --name-only -z HEAD", setupMs)
	if err != nil {
		return err
	}
	base, top, _ := strings.Cut(res.Stdout, "\n")
	e.base, e.top = base, map[string]bool{}
	for _, name := range strings.Split(top, "\x00") {
		e.top[name] = true
	}
	return nil
}

// Oracle applies the gold fix in the agent's checkout: the bug patch
// reversed, or, for a clone-mode row without one, the tree of the commit
// before the bug (SWE-smith commits each bug on top of the clean code).
// It runs on a plugin instance of its own, so it finds that commit again.
func (*env) Oracle(r abi.RolloutRequest) (abi.OracleResponse, error) {
	in, c, err := instance(r)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	if in.Patch != "" {
		if err := sdk.WriteFile("/tmp/.proctor-fix.patch", []byte(in.Patch), 0o600); err != nil {
			return abi.OracleResponse{}, err
		}
		res, err := run("setup", "apply the gold patch", "git apply -R --whitespace=nowarn /tmp/.proctor-fix.patch; rc=$?; rm -f /tmp/.proctor-fix.patch; exit $rc", setupMs)
		return abi.OracleResponse{Output: res.Stdout}, err
	}
	if in.Mode != modeClone {
		return abi.OracleResponse{}, sdk.Errorf("setup", "instance %s has no patch, so there is no gold fix to apply", in.ID)
	}
	const gold = "/tmp/.proctor-gold"
	if err := checkout(c, in, in.ref(), gold); err != nil {
		return abi.OracleResponse{}, err
	}
	_, gone, err := failingTests(in, gold)
	if err != nil {
		return abi.OracleResponse{}, err
	}
	clean := in.ref() + "~1"
	if gone {
		clean = in.ref() + "~2"
	}
	if _, err := run("setup", "clear", "rm -rf "+gold, setupMs); err != nil {
		return abi.OracleResponse{}, err
	}
	if err := checkout(c, in, clean, gold); err != nil {
		return abi.OracleResponse{}, sdk.Errorf("setup", "instance %s has no patch, and no parent commit to take the gold fix from: %v", in.ID, err)
	}
	// Turn /testbed into the clean tree: the difference, as git sees it.
	res, err := run("setup", "apply the clean tree",
		`export GIT_INDEX_FILE=/tmp/.proctor-gold.index; rm -f $GIT_INDEX_FILE; git read-tree HEAD && git --work-tree=`+gold+` add -A && `+
			`git diff --cached --binary HEAD > /tmp/.proctor-gold.patch && unset GIT_INDEX_FILE && git apply --binary /tmp/.proctor-gold.patch; rc=$?; `+
			`rm -rf `+gold+` /tmp/.proctor-gold.index /tmp/.proctor-gold.patch; exit $rc`, setupMs)
	return abi.OracleResponse{Output: res.Stdout}, err
}
