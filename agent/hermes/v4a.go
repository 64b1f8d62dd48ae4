package hermes

import (
	"regexp"
	"strings"

	"github.com/proctor-dev/proctor/agent/pystr"
)

// The V4A patch format of tools/patch_parser.py:
//
//	*** Begin Patch
//	*** Update File: path/to/file.py
//	@@ optional context hint @@
//	 context line
//	-removed line
//	+added line
//	*** Add File: path/to/new.py
//	+new file content
//	*** Delete File: path/to/old.py
//	*** Move File: old/path.py -> new/path.py
//	*** End Patch

type opKind int

const (
	opAdd opKind = iota
	opUpdate
	opDelete
	opMove
)

type hunkLine struct {
	prefix  byte // ' ', '-' or '+'
	content string
}

type hunk struct {
	hint  *string
	lines []hunkLine
}

type patchOp struct {
	kind    opKind
	path    string
	newPath string
	hunks   []hunk
}

var (
	updateRE = regexp.MustCompile(`^\*\*\*[` + pyWS + `]*Update[` + pyWS + `]+File:[` + pyWS + `]*(.+)`)
	addRE    = regexp.MustCompile(`^\*\*\*[` + pyWS + `]*Add[` + pyWS + `]+File:[` + pyWS + `]*(.+)`)
	deleteRE = regexp.MustCompile(`^\*\*\*[` + pyWS + `]*Delete[` + pyWS + `]+File:[` + pyWS + `]*(.+)`)
	moveRE   = regexp.MustCompile(`^\*\*\*[` + pyWS + `]*Move[` + pyWS + `]+File:[` + pyWS + `]*(.+?)[` + pyWS + `]*->[` + pyWS + `]*(.+)`)
	hintRE   = regexp.MustCompile(`^@@[` + pyWS + `]*(.+?)[` + pyWS + `]*@@`)
)

// parseV4A is parse_v4a_patch, which never reports an error: what it does
// not recognise it skips.
func parseV4A(text string) []patchOp {
	lines := strings.Split(text, "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		if strings.Contains(l, "*** Begin Patch") || strings.Contains(l, "***Begin Patch") {
			start = i
		} else if strings.Contains(l, "*** End Patch") || strings.Contains(l, "***End Patch") {
			end = i
			break
		}
	}
	var ops []patchOp
	var cur *patchOp
	var h *hunk
	flush := func() {
		if cur != nil {
			if h != nil && len(h.lines) > 0 {
				cur.hunks = append(cur.hunks, *h)
			}
			ops = append(ops, *cur)
		}
	}
	for i := start + 1; i < end; i++ {
		line := lines[i]
		if m := updateRE.FindStringSubmatch(line); m != nil {
			flush()
			cur, h = &patchOp{kind: opUpdate, path: pystr.Strip(m[1])}, nil
		} else if m := addRE.FindStringSubmatch(line); m != nil {
			flush()
			cur, h = &patchOp{kind: opAdd, path: pystr.Strip(m[1])}, &hunk{}
		} else if m := deleteRE.FindStringSubmatch(line); m != nil {
			flush()
			ops = append(ops, patchOp{kind: opDelete, path: pystr.Strip(m[1])})
			cur, h = nil, nil
		} else if m := moveRE.FindStringSubmatch(line); m != nil {
			flush()
			ops = append(ops, patchOp{kind: opMove, path: pystr.Strip(m[1]), newPath: pystr.Strip(m[2])})
			cur, h = nil, nil
		} else if strings.HasPrefix(line, "@@") {
			if cur != nil {
				if h != nil && len(h.lines) > 0 {
					cur.hunks = append(cur.hunks, *h)
				}
				h = &hunk{}
				if m := hintRE.FindStringSubmatch(line); m != nil {
					hint := m[1]
					h.hint = &hint
				}
			}
		} else if cur != nil && line != "" {
			if h == nil {
				h = &hunk{}
			}
			switch line[0] {
			case '+', '-', ' ':
				h.lines = append(h.lines, hunkLine{line[0], line[1:]})
			case '\\':
				// "\ No newline at end of file"
			default:
				h.lines = append(h.lines, hunkLine{' ', line})
			}
		}
	}
	flush()
	return ops
}
