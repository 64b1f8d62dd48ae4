// Package difflib reproduces the parts of Python's difflib that
// hermes-agent's tools show a model: SequenceMatcher (with its autojunk
// heuristic, so ratios and matching blocks agree to the last element) and
// unified_diff's text.
package difflib

import (
	"fmt"
	"slices"
	"strings"
)

// Match is a matching block: a[A:A+Size] == b[B:B+Size].
type Match struct{ A, B, Size int }

// OpCode is one of SequenceMatcher.get_opcodes' tuples.
type OpCode struct {
	Tag            byte // 'r'eplace, 'd'elete, 'i'nsert, 'e'qual
	I1, I2, J1, J2 int
}

// Matcher is difflib.SequenceMatcher(None, a, b) with autojunk=True.
type Matcher[T comparable] struct {
	a, b    []T
	b2j     map[T][]int
	popular map[T]bool
	blocks  []Match
}

// New returns a matcher of a against b.
func New[T comparable](a, b []T) *Matcher[T] {
	m := &Matcher[T]{a: a, b: b, b2j: map[T][]int{}, popular: map[T]bool{}}
	for i, e := range b {
		m.b2j[e] = append(m.b2j[e], i)
	}
	if n := len(b); n >= 200 {
		ntest := n/100 + 1
		for e, idx := range m.b2j {
			if len(idx) > ntest {
				m.popular[e] = true
			}
		}
		for e := range m.popular {
			delete(m.b2j, e)
		}
	}
	return m
}

// longest is find_longest_match(alo, ahi, blo, bhi). No element is junk
// (isjunk is None), so only the first pair of extension loops can move.
func (m *Matcher[T]) longest(alo, ahi, blo, bhi int) Match {
	a, b := m.a, m.b
	besti, bestj, bestsize := alo, blo, 0
	j2len := map[int]int{}
	for i := alo; i < ahi; i++ {
		newj2len := map[int]int{}
		for _, j := range m.b2j[a[i]] {
			if j < blo {
				continue
			}
			if j >= bhi {
				break
			}
			k := j2len[j-1] + 1
			newj2len[j] = k
			if k > bestsize {
				besti, bestj, bestsize = i-k+1, j-k+1, k
			}
		}
		j2len = newj2len
	}
	for besti > alo && bestj > blo && a[besti-1] == b[bestj-1] {
		besti, bestj, bestsize = besti-1, bestj-1, bestsize+1
	}
	for besti+bestsize < ahi && bestj+bestsize < bhi && a[besti+bestsize] == b[bestj+bestsize] {
		bestsize++
	}
	return Match{besti, bestj, bestsize}
}

// MatchingBlocks is get_matching_blocks: adjacent blocks merged, ending
// with the sentinel (len(a), len(b), 0).
func (m *Matcher[T]) MatchingBlocks() []Match {
	if m.blocks != nil {
		return m.blocks
	}
	la, lb := len(m.a), len(m.b)
	queue := [][4]int{{0, la, 0, lb}}
	var blocks []Match
	for len(queue) > 0 {
		q := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		alo, ahi, blo, bhi := q[0], q[1], q[2], q[3]
		x := m.longest(alo, ahi, blo, bhi)
		if x.Size > 0 {
			blocks = append(blocks, x)
			if alo < x.A && blo < x.B {
				queue = append(queue, [4]int{alo, x.A, blo, x.B})
			}
			if x.A+x.Size < ahi && x.B+x.Size < bhi {
				queue = append(queue, [4]int{x.A + x.Size, ahi, x.B + x.Size, bhi})
			}
		}
	}
	slices.SortFunc(blocks, func(p, q Match) int {
		if p.A != q.A {
			return p.A - q.A
		}
		if p.B != q.B {
			return p.B - q.B
		}
		return p.Size - q.Size
	})
	var out []Match
	var i1, j1, k1 int
	for _, x := range blocks {
		if i1+k1 == x.A && j1+k1 == x.B {
			k1 += x.Size
			continue
		}
		if k1 > 0 {
			out = append(out, Match{i1, j1, k1})
		}
		i1, j1, k1 = x.A, x.B, x.Size
	}
	if k1 > 0 {
		out = append(out, Match{i1, j1, k1})
	}
	m.blocks = append(out, Match{la, lb, 0})
	return m.blocks
}

// Ratio is ratio(): 2*M/T, or 1.0 for two empty sequences.
func (m *Matcher[T]) Ratio() float64 {
	matches := 0
	for _, x := range m.MatchingBlocks() {
		matches += x.Size
	}
	if n := len(m.a) + len(m.b); n > 0 {
		return 2.0 * float64(matches) / float64(n)
	}
	return 1.0
}

// OpCodes is get_opcodes.
func (m *Matcher[T]) OpCodes() []OpCode {
	var out []OpCode
	i, j := 0, 0
	for _, x := range m.MatchingBlocks() {
		var tag byte
		switch {
		case i < x.A && j < x.B:
			tag = 'r'
		case i < x.A:
			tag = 'd'
		case j < x.B:
			tag = 'i'
		}
		if tag != 0 {
			out = append(out, OpCode{tag, i, x.A, j, x.B})
		}
		i, j = x.A+x.Size, x.B+x.Size
		if x.Size > 0 {
			out = append(out, OpCode{'e', x.A, i, x.B, j})
		}
	}
	return out
}

// GroupedOpCodes is get_grouped_opcodes(n).
func (m *Matcher[T]) GroupedOpCodes(n int) [][]OpCode {
	codes := m.OpCodes()
	if len(codes) == 0 {
		codes = []OpCode{{'e', 0, 1, 0, 1}}
	}
	if c := &codes[0]; c.Tag == 'e' {
		c.I1, c.J1 = max(c.I1, c.I2-n), max(c.J1, c.J2-n)
	}
	if c := &codes[len(codes)-1]; c.Tag == 'e' {
		c.I2, c.J2 = min(c.I2, c.I1+n), min(c.J2, c.J1+n)
	}
	nn := n + n
	var groups [][]OpCode
	var group []OpCode
	for _, c := range codes {
		if c.Tag == 'e' && c.I2-c.I1 > nn {
			group = append(group, OpCode{'e', c.I1, min(c.I2, c.I1+n), c.J1, min(c.J2, c.J1+n)})
			groups = append(groups, group)
			group = nil
			c.I1, c.J1 = max(c.I1, c.I2-n), max(c.J1, c.J2-n)
		}
		group = append(group, c)
	}
	if len(group) > 0 && !(len(group) == 1 && group[0].Tag == 'e') {
		groups = append(groups, group)
	}
	return groups
}

// Ratio is SequenceMatcher(None, a, b).ratio() of two strings, compared
// character by character.
func Ratio(a, b string) float64 {
	return New([]rune(a), []rune(b)).Ratio()
}

func formatRange(start, stop int) string {
	begin, length := start+1, stop-start
	if length == 1 {
		return fmt.Sprint(begin)
	}
	if length == 0 {
		begin--
	}
	return fmt.Sprintf("%d,%d", begin, length)
}

// UnifiedDiff is the text of difflib.unified_diff(a, b, fromfile, tofile),
// joined, for two lists of lines that keep their line ends (splitlines(keepends=True)).
// A last line without an end stays without one, as Python leaves it.
func UnifiedDiff(a, b []string, fromfile, tofile string) string {
	var sb strings.Builder
	for i, group := range New(a, b).GroupedOpCodes(3) {
		if i == 0 {
			fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromfile, tofile)
		}
		first, last := group[0], group[len(group)-1]
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", formatRange(first.I1, last.I2), formatRange(first.J1, last.J2))
		for _, c := range group {
			if c.Tag == 'e' {
				for _, l := range a[c.I1:c.I2] {
					sb.WriteString(" " + l)
				}
				continue
			}
			if c.Tag == 'r' || c.Tag == 'd' {
				for _, l := range a[c.I1:c.I2] {
					sb.WriteString("-" + l)
				}
			}
			if c.Tag == 'r' || c.Tag == 'i' {
				for _, l := range b[c.J1:c.J2] {
					sb.WriteString("+" + l)
				}
			}
		}
	}
	return sb.String()
}
