package agent

import (
	"fmt"
	"strings"
)

// UnifiedDiff is a small unified diff of a one-place edit: the changed
// region with three lines of context (edits from patch touch one region or,
// with replace_all, several; each gets its own hunk).
func UnifiedDiff(path, a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	// Common prefix and suffix; what is left is the change.
	p := 0
	for p < len(al) && p < len(bl) && al[p] == bl[p] {
		p++
	}
	s := 0
	for s < len(al)-p && s < len(bl)-p && al[len(al)-1-s] == bl[len(bl)-1-s] {
		s++
	}
	if p == len(al) && p == len(bl) {
		return ""
	}
	const ctx = 3
	start := max(p-ctx, 0)
	aEnd := min(len(al)-s+ctx, len(al))
	bEnd := min(len(bl)-s+ctx, len(bl))
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- a/%s\n+++ b/%s\n", strings.TrimPrefix(path, "/"), strings.TrimPrefix(path, "/"))
	fmt.Fprintf(&sb, "@@ -%d,%d +%d,%d @@\n", start+1, aEnd-start, start+1, bEnd-start)
	for i := start; i < p; i++ {
		sb.WriteString(" " + al[i] + "\n")
	}
	for i := p; i < len(al)-s; i++ {
		sb.WriteString("-" + al[i] + "\n")
	}
	for i := p; i < len(bl)-s; i++ {
		sb.WriteString("+" + bl[i] + "\n")
	}
	for i := len(al) - s; i < aEnd; i++ {
		sb.WriteString(" " + al[i] + "\n")
	}
	return sb.String()
}
