package main

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Profile is how SWE-smith's harness runs and reads one repository's
// tests: the test command run in /testbed and the parser of its log.
type Profile struct {
	TestCmd   string `json:"test_cmd"`
	LogParser string `json:"log_parser"`
	// keywords selects the FAIL_TO_PASS tests by name with -k (mypy's
	// data-driven tests) instead of by file.
	keywords bool
}

// testPytest is SWE-smith's TEST_PYTEST, the test command of every
// repository its table does not give another.
const testPytest = "pytest --disable-warnings --color=no --tb=no --verbose"

// defaultProfile is SWE-smith's DEFAULT_SPECS test command with the
// parser its grading falls back to (parse_log_pytest).
var defaultProfile = Profile{TestCmd: testPytest, LogParser: "pytest"}

// builtinProfiles are the repositories of SWE-smith's table whose test
// command or log parser is not the default's, by owner/repo. They pin the
// behaviour of SWE-bench/SWE-smith swesmith/constants.py
// (MAP_REPO_TO_SPECS), swesmith/harness/log_parsers.py (MAP_REPO_TO_PARSER)
// and swesmith/harness/utils.py (MAP_REPO_TO_TEST_CMD) at cf2e649; the
// repo profiles of swesmith/profiles/python.py carry the same values.
var builtinProfiles = map[string]Profile{
	"gin-gonic/gin":        {TestCmd: "go test -v ./...", LogParser: "gotest"},
	"HIPS/autograd":        {TestCmd: testPytest, LogParser: "autograd"},
	"jax-ml/jax":           {TestCmd: testPytest + " -n auto", LogParser: "pytest"},
	"mido/mido":            {TestCmd: testPytest + " -rs -c /dev/null", LogParser: "pytest"},
	"paramiko/paramiko":    {TestCmd: "pytest -rA --color=no --disable-warnings", LogParser: "paramiko"},
	"pydantic/pydantic":    {TestCmd: "/root/.local/bin/uv run " + testPytest, LogParser: "pytest"},
	"python/mypy":          {TestCmd: "pytest --color=no -rA -k", LogParser: "mypy", keywords: true},
	"tkrajina/gpxpy":       {TestCmd: "pytest test.py --verbose --color=no --tb=no --disable-warnings", LogParser: "pytest"},
	"tornadoweb/tornado":   {TestCmd: "python -m tornado.test --verbose", LogParser: "tornado"},
	"un33k/python-slugify": {TestCmd: "python test.py --verbose", LogParser: "python_slugify"},
}

// mirrorName is SWE-smith's name of a repository's mirror:
// owner__repo.<first 8 hex digits of the commit>.
var mirrorName = regexp.MustCompile(`^(.+?)__(.+)\.[0-9a-f]{8}$`)

// repoKey names an instance's repository as owner/repo, the key of its
// profile: from the row's repo, read as SWE-smith's mirror name
// ("swesmith/owner__repo.1a2b3c4d") where it is one, else from the
// instance id's first dotted part as SWE-smith's grading does
// ("owner__repo.1a2b3c4d.bug" → owner/repo).
func repoKey(in Instance) string {
	last := in.Repo[strings.LastIndex(in.Repo, "/")+1:]
	switch m := mirrorName.FindStringSubmatch(last); {
	case m != nil:
		return m[1] + "/" + m[2]
	case in.Repo != "":
		return in.Repo
	}
	first, _, _ := strings.Cut(in.ID, ".")
	return strings.ReplaceAll(first, "__", "/")
}

// profileFor is the profile of an instance's repository: the config's,
// else SWE-smith's, else the default. source says which.
func profileFor(c Config, in Instance) (p Profile, source string) {
	key := repoKey(in)
	if p, ok := c.Profiles[key]; ok {
		return p, fmt.Sprintf("env.config.profiles.%q", key)
	}
	if p, ok := builtinProfiles[key]; ok {
		return p, "SWE-smith's for " + key
	}
	return defaultProfile, "SWE-smith's default (" + key + " has none of its own)"
}

// hasProfile reports whether the config or SWE-smith gives the repository
// a profile of its own.
func hasProfile(c Config, key string) bool {
	_, conf := c.Profiles[key]
	_, builtin := builtinProfiles[key]
	return conf || builtin
}

// checkProfiles validates the config's profiles and fills in the default
// parser.
func checkProfiles(ps map[string]Profile) error {
	for key, p := range ps {
		if strings.TrimSpace(p.TestCmd) == "" {
			return fmt.Errorf("env.config.profiles.%q.test_cmd is empty: give the command that runs the repository's tests in /testbed", key)
		}
		if p.LogParser == "" {
			p.LogParser = "pytest"
		}
		if logParsers[p.LogParser] == nil {
			names := make([]string, 0, len(logParsers))
			for n := range logParsers {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("env.config.profiles.%q.log_parser is %q: use one of %s", key, p.LogParser, strings.Join(names, ", "))
		}
		ps[key] = p
	}
	return nil
}

// testCommand is the command SWE-smith's harness runs for an instance,
// and the test files its grading keeps tests from (none: every test).
// With pytest it runs only the FAIL_TO_PASS tests' files (sorted, as
// swesmith/profiles/base.py sorts them) and grading keeps only the tests
// in them; mypy selects its FAIL_TO_PASS tests by name. Any other command
// runs as it is. The names are shell-quoted (SWE-smith pastes them in as
// they are). It pins the behaviour of SWE-bench/SWE-smith
// swesmith/harness/utils.py get_test_command at cf2e649.
func testCommand(p Profile, in Instance) (cmd string, files []string) {
	if !strings.Contains(p.TestCmd, "pytest") {
		return p.TestCmd, nil
	}
	if p.keywords {
		names := make([]string, len(in.FailToPass))
		for i, id := range in.FailToPass {
			if j := strings.LastIndex(id, "::"); j >= 0 {
				id = id[j+2:]
			}
			names[i] = id
		}
		return p.TestCmd + " " + quote(strings.Join(names, " or ")), nil
	}
	for _, id := range in.FailToPass {
		f, _, _ := strings.Cut(id, "::")
		if !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return p.TestCmd + " " + quoteAll(files), files
}
