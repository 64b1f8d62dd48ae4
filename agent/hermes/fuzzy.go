package hermes

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/proctor-dev/proctor/agent/difflib"
	"github.com/proctor-dev/proctor/agent/pystr"
)

// The patch tool's matching: tools/fuzzy_match.py's chain of strategies,
// tried in order until one finds the old text (exact, line-trimmed,
// whitespace-normalized, indentation-flexible, escape-normalized,
// trimmed-boundary, block-anchor, context-aware). Positions are byte
// offsets where Python counts characters; every strategy cuts at line ends
// or at ASCII characters, so the matches are the same.

type span struct{ start, end int }

type strategy func(content, pattern string) ([]span, error)

var strategies = []strategy{
	exactMatches, lineTrimmed, whitespaceNormalized, indentationFlexible,
	escapeNormalized, trimmedBoundary, blockAnchor, contextAware,
}

// fuzzyReplace is fuzzy_find_and_replace: the new content and the number
// of replacements, or an error message for the model (an error is a Python
// exception the tool reports as such).
func fuzzyReplace(content, old, repl string, all bool) (string, int, string, error) {
	if old == "" {
		return content, 0, "old_string cannot be empty", nil
	}
	if old == repl {
		return content, 0, "old_string and new_string are identical", nil
	}
	for _, st := range strategies {
		m, err := st(content, old)
		if err != nil {
			return content, 0, "", err
		}
		if len(m) == 0 {
			continue
		}
		if len(m) > 1 && !all {
			return content, 0, fmt.Sprintf("Found %d matches for old_string. Provide more context to make it unique, or use replace_all=True.", len(m)), nil
		}
		return applyReplacements(content, m, repl), len(m), "", nil
	}
	return content, 0, "Could not find a match for old_string in the file", nil
}

// applyReplacements replaces from the last match to the first.
func applyReplacements(content string, m []span, repl string) string {
	m = slices.Clone(m)
	slices.SortStableFunc(m, func(a, b span) int { return b.start - a.start })
	for _, x := range m {
		content = content[:x.start] + repl + content[x.end:]
	}
	return content
}

// exactMatches finds every occurrence, overlapping ones included.
func exactMatches(content, pattern string) ([]span, error) {
	var out []span
	for start := 0; start <= len(content); {
		i := strings.Index(content[start:], pattern)
		if i < 0 {
			break
		}
		out = append(out, span{start + i, start + i + len(pattern)})
		start += i + 1
	}
	return out, nil
}

func mapLines(lines []string, f func(string) string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = f(l)
	}
	return out
}

func lineTrimmed(content, pattern string) ([]span, error) {
	lines := strings.Split(content, "\n")
	return normalizedMatches(content, lines, mapLines(lines, pystr.Strip), strings.Join(mapLines(strings.Split(pattern, "\n"), pystr.Strip), "\n")), nil
}

var blanks = regexp.MustCompile(`[ \t]+`)

func whitespaceNormalized(content, pattern string) ([]span, error) {
	nc := blanks.ReplaceAllString(content, " ")
	m, _ := exactMatches(nc, blanks.ReplaceAllString(pattern, " "))
	if len(m) == 0 {
		return nil, nil
	}
	return mapNormalized(content, nc, m)
}

func indentationFlexible(content, pattern string) ([]span, error) {
	lines := strings.Split(content, "\n")
	return normalizedMatches(content, lines, mapLines(lines, pystr.LStrip), strings.Join(mapLines(strings.Split(pattern, "\n"), pystr.LStrip), "\n")), nil
}

var unescaper = strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\r`, "\r")

func escapeNormalized(content, pattern string) ([]span, error) {
	// Python replaces \n, then \t, then \r, each over the whole text; the
	// three cannot overlap, so one pass gives the same.
	u := unescaper.Replace(pattern)
	if u == pattern {
		return nil, nil
	}
	return exactMatches(content, u)
}

func trimmedBoundary(content, pattern string) ([]span, error) {
	pl := strings.Split(pattern, "\n")
	pl[0] = pystr.Strip(pl[0])
	if len(pl) > 1 {
		pl[len(pl)-1] = pystr.Strip(pl[len(pl)-1])
	}
	want := strings.Join(pl, "\n")
	lines := strings.Split(content, "\n")
	var out []span
	n := len(pl)
	for i := 0; i+n <= len(lines); i++ {
		block := slices.Clone(lines[i : i+n])
		block[0] = pystr.Strip(block[0])
		if n > 1 {
			block[n-1] = pystr.Strip(block[n-1])
		}
		if strings.Join(block, "\n") == want {
			out = append(out, linePositions(lines, i, i+n, len(content)))
		}
	}
	return out, nil
}

var unicodeASCII = strings.NewReplacer("\u201c", `"`, "\u201d", `"`, "\u2018", "'", "\u2019", "'", "\u2014", "--", "\u2013", "-", "\u2026", "...", "\u00a0", " ")

func blockAnchor(content, pattern string) ([]span, error) {
	pl := strings.Split(unicodeASCII.Replace(pattern), "\n")
	if len(pl) < 2 {
		return nil, nil
	}
	first, last := pystr.Strip(pl[0]), pystr.Strip(pl[len(pl)-1])
	norm := strings.Split(unicodeASCII.Replace(content), "\n")
	orig := strings.Split(content, "\n")
	n := len(pl)
	var cand []int
	for i := 0; i+n <= len(norm); i++ {
		if pystr.Strip(norm[i]) == first && pystr.Strip(norm[i+n-1]) == last {
			cand = append(cand, i)
		}
	}
	threshold := 0.30
	if len(cand) == 1 {
		threshold = 0.10
	}
	var out []span
	for _, i := range cand {
		sim := 1.0
		if n > 2 {
			sim = difflib.Ratio(strings.Join(norm[i+1:i+n-1], "\n"), strings.Join(pl[1:n-1], "\n"))
		}
		if sim >= threshold {
			out = append(out, linePositions(orig, i, i+n, len(content)))
		}
	}
	return out, nil
}

func contextAware(content, pattern string) ([]span, error) {
	pl := mapLines(strings.Split(pattern, "\n"), pystr.Strip)
	lines := strings.Split(content, "\n")
	cl := mapLines(lines, pystr.Strip)
	plr := make([][]rune, len(pl))
	for i, l := range pl {
		plr[i] = []rune(l)
	}
	clr := make([][]rune, len(cl))
	n := len(pl)
	var out []span
	for i := 0; i+n <= len(lines); i++ {
		high := 0
		for k := 0; k < n; k++ {
			if clr[i+k] == nil {
				clr[i+k] = []rune(cl[i+k])
			}
			a, b := plr[k], clr[i+k]
			// real_quick_ratio bounds ratio from above: skip what cannot
			// reach 0.80.
			if t := len(a) + len(b); t > 0 && 2.0*float64(min(len(a), len(b)))/float64(t) < 0.80 {
				continue
			}
			if difflib.New(a, b).Ratio() >= 0.80 {
				high++
			}
		}
		if float64(high) >= float64(n)*0.5 {
			out = append(out, linePositions(lines, i, i+n, len(content)))
		}
	}
	return out, nil
}

// linePositions is _calculate_line_positions: the span of lines
// [start, end).
func linePositions(lines []string, start, end, length int) span {
	s, e := 0, 0
	for i, l := range lines[:end] {
		if i < start {
			s += len(l) + 1
		}
		e += len(l) + 1
	}
	e--
	if e >= length {
		e = length
	}
	return span{s, e}
}

// normalizedMatches is _find_normalized_matches.
func normalizedMatches(content string, lines, norm []string, pattern string) []span {
	n := len(strings.Split(pattern, "\n"))
	var out []span
	for i := 0; i+n <= len(norm); i++ {
		if strings.Join(norm[i:i+n], "\n") == pattern {
			out = append(out, linePositions(lines, i, i+n, len(content)))
		}
	}
	return out
}

func blank(c byte) bool { return c == ' ' || c == '\t' }

// mapNormalized is _map_normalized_positions: matches in the
// whitespace-collapsed text back to the original.
func mapNormalized(orig, norm string, matches []span) ([]span, error) {
	o2n := make([]int, 0, len(orig))
	oi, ni := 0, 0
	for oi < len(orig) && ni < len(norm) {
		switch {
		case orig[oi] == norm[ni]:
			o2n = append(o2n, ni)
			oi++
			ni++
		case blank(orig[oi]) && norm[ni] == ' ':
			o2n = append(o2n, ni)
			oi++
			if oi < len(orig) && !blank(orig[oi]) {
				ni++
			}
		default:
			o2n = append(o2n, ni)
			oi++
		}
	}
	for ; oi < len(orig); oi++ {
		o2n = append(o2n, len(norm))
	}
	first, last := map[int]int{}, map[int]int{}
	for op, np := range o2n {
		if _, ok := first[np]; !ok {
			first[np] = op
		}
		last[np] = op
	}
	var out []span
	for _, m := range matches {
		start, ok := first[m.start]
		if !ok {
			start = -1
			for i, n := range o2n {
				if n >= m.start {
					start = i
					break
				}
			}
			if start < 0 {
				return nil, &pyError{"ValueError", "min() arg is an empty sequence"}
			}
		}
		end := start + (m.end - m.start)
		if e, ok := last[m.end-1]; ok {
			end = e + 1
		}
		for end < len(orig) && blank(orig[end]) {
			end++
		}
		out = append(out, span{start, min(end, len(orig))})
	}
	return out, nil
}
