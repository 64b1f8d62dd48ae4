package main

import (
	"os"
	"strings"
	"testing"
)

// TestSecurityDocKeepsTheImportHole: docs/security.md, where it says the
// SWE-smith plugin grades in a fresh sandbox, also says what that does not
// rule out: the code the tests import runs in the test process (issue 32:
// security.md claimed the fresh sandbox ruled cheating out while
// docs/config.md said otherwise). swesmith_rows.txtar keeps an agent that
// passes this way.
func TestSecurityDocKeepsTheImportHole(t *testing.T) {
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "The SWE-smith plugin grades in a fresh sandbox")
	if i < 0 {
		t.Fatal("docs/security.md no longer says how the SWE-smith plugin grades")
	}
	para, _, _ := strings.Cut(doc[i:], "\n- ")
	para = strings.Join(strings.Fields(para), " ")
	for _, want := range []string{"does not rule cheating out", "__init__.py", "test process"} {
		if !strings.Contains(para, want) {
			t.Errorf("the paragraph does not say %q:\n%s", want, para)
		}
	}
}
