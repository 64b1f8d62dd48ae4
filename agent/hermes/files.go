package hermes

import (
	"context"
	"fmt"
	"math/big"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
)

// The file tools are tools/file_tools.py over tools/file_operations.py's
// ShellFileOperations: every operation is the same shell command hermes
// runs, so what the commands print (wc, sed, grep, bash's own errors)
// reaches the model unchanged.

const (
	maxLines      = 2000 // MAX_LINES
	maxLineLength = 2000 // MAX_LINE_LENGTH
)

var binaryExt = setOf(".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".ico", ".tiff", ".tif", ".svg",
	".mp3", ".mp4", ".wav", ".avi", ".mov", ".mkv", ".flac", ".ogg", ".webm",
	".zip", ".tar", ".gz", ".bz2", ".xz", ".7z", ".rar",
	".pdf", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx",
	".exe", ".dll", ".so", ".dylib", ".o", ".a", ".pyc", ".pyo", ".class", ".wasm", ".bin",
	".ttf", ".otf", ".woff", ".woff2", ".eot",
	".db", ".sqlite", ".sqlite3")

var imageExt = setOf(".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".ico")

func setOf(s ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return m
}

// splitExt is os.path.splitext(p)[1]: leading dots of the name do not
// start an extension.
func splitExt(p string) string {
	name := p[strings.LastIndexByte(p, '/')+1:]
	rest := strings.TrimLeft(name, ".")
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return ""
	}
	return rest[i:]
}

// dirname and join are os.path's.
func dirname(p string) string {
	i := strings.LastIndexByte(p, '/') + 1
	head := p[:i]
	if t := strings.TrimRight(head, "/"); t != "" {
		return t
	}
	return head
}

func join(a, b string) string {
	if strings.HasPrefix(b, "/") {
		return b
	}
	if a == "" || strings.HasSuffix(a, "/") {
		return a + b
	}
	return a + "/" + b
}

// readResult is ReadResult, written out as to_dict() writes it.
type readResult struct {
	content    string
	totalLines int
	fileSize   int
	truncated  bool
	hint       string
	binary     bool
	image      bool
	err        string
	similar    []string
}

func (r readResult) dict() *pyjson.Object {
	o := pyjson.NewObject().Set("content", r.content).Set("total_lines", r.totalLines).Set("file_size", r.fileSize).Set("truncated", r.truncated)
	if r.hint != "" {
		o.Set("hint", r.hint)
	}
	o.Set("is_binary", r.binary).Set("is_image", r.image)
	if r.err != "" {
		o.Set("error", r.err)
	}
	if len(r.similar) > 0 {
		o.Set("similar_files", r.similar)
	}
	return o
}

// pyInt is int(s) for what commands print, or false.
func pyInt(s string) (int, bool) {
	s = pystr.Strip(s)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "" || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
		return 0, false
	}
	n := 0
	for _, r := range s {
		if r == '_' {
			continue
		}
		if !unicode.Is(unicode.Nd, r) {
			return 0, false
		}
		n = n*10 + digitValue(r)
	}
	if neg {
		n = -n
	}
	return n, true
}

// digitValue is the value of a decimal digit of any script: every Nd
// block is ten consecutive code points from zero.
func digitValue(r rune) int {
	z := r
	for unicode.Is(unicode.Nd, z-1) && r-z < 9 {
		z--
	}
	return int(r - z)
}

// numbered is _add_line_numbers.
func numbered(text string, start int) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if pystr.Len(l) > maxLineLength {
			l = pystr.Head(l, maxLineLength) + "... [truncated]"
		}
		lines[i] = fmt.Sprintf("%6d|%s", start+i, l)
	}
	return strings.Join(lines, "\n")
}

// readFileOp is ShellFileOperations.read_file. A Python exception it
// raises comes back as a *pyError.
func (s *Session) readFileOp(ctx context.Context, p string, offset, limit any) (readResult, error) {
	p, err := s.expandPath(ctx, p)
	if err != nil {
		return readResult{}, err
	}
	if limit, err = pyMin(limit, big.NewInt(maxLines)); err != nil {
		return readResult{}, err
	}
	// end_line = offset + limit - 1, computed here but raised where
	// hermes raises it: after the checks for a missing or binary file.
	sum, endErr := pyAdd(offset, limit)
	var end any
	if endErr == nil {
		end, endErr = pyAdd(sum, big.NewInt(-1))
	}
	q := escapeArg(p)
	dir := dirname(p)
	if dir == "" {
		dir = "."
	}
	// One sandbox call runs what hermes would run next in each case: the
	// listing for a missing file, the read for a present one.
	steps := []step{
		{cmd: fmt.Sprintf("wc -c < %s 2>/dev/null", q)},
		{cmd: fmt.Sprintf("head -c 1000 %s 2>/dev/null", q), when: `[ "$r0" = 0 ]`},
		{cmd: fmt.Sprintf("ls -1 %s 2>/dev/null | head -20", escapeArg(dir)), when: `[ "$r0" != 0 ]`},
	}
	if endErr == nil {
		// Lines past 8004 bytes are surely past 2000 characters: cut them
		// in the sandbox. cut ends the last line with a newline; the file's
		// last byte says whether sed's output had one.
		found := `[ "$r0" = 0 ]`
		steps = append(steps,
			step{cmd: fmt.Sprintf("sed -n '%s,%sp' %s", pyjson.Str(offset), pyjson.Str(end), q), filter: "cut -b 1-8004", when: found},
			step{cmd: fmt.Sprintf("wc -l < %s", q), when: found},
			step{cmd: fmt.Sprintf("tail -c 1 %s 2>/dev/null", q), when: found},
		)
	}
	r, err := s.run(ctx, s.envTimeout(), 2000*8005+1<<20, steps...)
	if err != nil {
		return readResult{}, err
	}
	if r[0].code != 0 {
		return suggestSimilar(p, dir, r[2]), nil
	}
	size, _ := pyInt(r[0].out)
	ext := strings.ToLower(splitExt(p))
	if imageExt[ext] {
		return readResult{image: true, binary: true, fileSize: size,
			hint: "Image file detected. Automatically redirected to vision_analyze tool. Use vision_analyze with this file path to inspect the image contents."}, nil
	}
	if binaryExt[ext] || likelyBinary(r[1].out) {
		return readResult{binary: true, fileSize: size, err: "Binary file - cannot display as text. Use appropriate tools to handle this file type."}, nil
	}
	if endErr != nil {
		return readResult{}, endErr
	}
	sed := r[3]
	if sed.code != 0 {
		return readResult{err: "Failed to read file: " + sed.out}, nil
	}
	total, _ := pyInt(r[4].out)
	out := sed.out
	if strings.HasSuffix(out, "\n") && r[5].out != "\n" && size > 0 {
		// The file does not end with a newline: sed's output did not
		// either if it reached the last line.
		endLine, _ := asNum(end)
		if endLine.float() >= float64(total+1) {
			out = out[:len(out)-1]
		}
	}
	res := readResult{totalLines: total, fileSize: size}
	if res.truncated, err = pyCompare(big.NewInt(int64(total)), ">", end); err != nil {
		return readResult{}, err
	}
	if res.truncated {
		next, _ := pyAdd(end, big.NewInt(1))
		res.hint = fmt.Sprintf("Use offset=%s to continue reading (showing %s-%s of %d lines)", pyjson.Str(next), pyjson.Str(offset), pyjson.Str(end), total)
	}
	start, err := startLine(offset)
	if err != nil {
		return readResult{}, err
	}
	res.content = numbered(out, start)
	return res, nil
}

// startLine is enumerate's start: an int.
func startLine(v any) (int, error) {
	n, ok := asNum(v)
	if !ok || n.isFloat {
		return 0, typeErr("'%s' object cannot be interpreted as an integer", pyjson.TypeName(v))
	}
	return int(n.i), nil
}

// likelyBinary is the content half of _is_likely_binary: more than 30% of
// the first 1000 characters are control characters other than \n \r \t.
func likelyBinary(sample string) bool {
	if sample == "" {
		return false
	}
	bad, n := 0, 0
	for _, r := range sample {
		if n == 1000 {
			break
		}
		n++
		if r < 32 && r != '\n' && r != '\r' && r != '\t' {
			bad++
		}
	}
	return float64(bad)/float64(n) > 0.30
}

// suggestSimilar is _suggest_similar_files over the output of `ls -1 dir |
// head -20`: names sharing at least half of the missing name's letters.
func suggestSimilar(p, dir string, ls result) readResult {
	name := strings.ToLower(p[strings.LastIndexByte(p, '/')+1:])
	var similar []string
	if ls.code == 0 && pystr.Strip(ls.out) != "" {
		want := map[rune]bool{}
		for _, r := range name {
			want[r] = true
		}
		for _, f := range strings.Split(pystr.Strip(ls.out), "\n") {
			common := map[rune]bool{}
			for _, r := range strings.ToLower(f) {
				if want[r] {
					common[r] = true
				}
			}
			if float64(len(common)) >= float64(pystr.Len(name))*0.5 {
				similar = append(similar, join(dir, f))
			}
		}
	}
	if len(similar) > 5 {
		similar = similar[:5]
	}
	return readResult{err: "File not found: " + p, similar: similar}
}

// readFile is read_file_tool.
func (s *Session) readFile(ctx context.Context, args *pyjson.Object) (reply, error) {
	p := arg(args, "path", "")
	offset := arg(args, "offset", big.NewInt(1))
	limit := arg(args, "limit", big.NewInt(500))
	ps, ok := p.(string)
	if !ok {
		return errorReply(false, "expected str, bytes or os.PathLike object, not %s", pyjson.TypeName(p)), nil
	}
	if strings.ContainsRune(ps, 0) {
		return errorReply(false, "embedded null byte"), nil
	}
	res, err := s.readFileOp(ctx, ps, offset, limit)
	if err != nil {
		if pe, ok := err.(*pyError); ok {
			return errorReply(false, "%s", pe.Msg), nil
		}
		return reply{}, err
	}
	if res.content != "" {
		res.content = redact(res.content)
	}
	d := res.dict()
	count := s.track([]any{"read", p, offset, limit})
	if count >= 4 {
		return reply{obj: pyjson.NewObject().Set("error", fmt.Sprintf("BLOCKED: You have read this exact file region %d times in a row. "+
			"The content has NOT changed. You already have this information. STOP re-reading and proceed with your task.", count)).
			Set("path", p).Set("already_read", count)}, nil
	}
	if count >= 3 {
		d.Set("_warning", fmt.Sprintf("You have read this exact file region %d times consecutively. "+
			"The content has not changed since your last read. Use the information you already have. "+
			"If you are stuck in a loop, stop reading and proceed with writing or responding.", count))
	}
	return reply{obj: d}, nil
}

// track counts consecutive identical read and search calls (file_tools'
// _read_tracker): any other tool resets it.
func (s *Session) track(key []any) int {
	if s.reads.last != nil && pyEqual(s.reads.last, key) {
		s.reads.consecutive++
	} else {
		s.reads.last, s.reads.consecutive = key, 1
	}
	return s.reads.consecutive
}

// writeDenied is the part of _is_write_denied that does not depend on the
// machine hermes ran on: system files under /etc.
func writeDenied(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	c := path.Clean(p)
	switch c {
	case "/etc/sudoers", "/etc/passwd", "/etc/shadow":
		return true
	}
	return strings.HasPrefix(c, "/etc/sudoers.d/") || strings.HasPrefix(c, "/etc/systemd/")
}

// writeResult is WriteResult.to_dict().
func writeResult(n int, dirs bool, err string) *pyjson.Object {
	o := pyjson.NewObject().Set("bytes_written", n).Set("dirs_created", dirs)
	if err != "" {
		o.Set("error", err)
	}
	return o
}

// writeFileOp is ShellFileOperations.write_file; content nil is Python's
// None.
func (s *Session) writeFileOp(ctx context.Context, pv any, content any) (*pyjson.Object, error) {
	p, ok := pv.(string)
	if !ok {
		if pyjson.Truthy(pv) {
			return nil, attrErr(pv, "startswith")
		}
		return nil, typeErr("expected str, bytes or os.PathLike object, not %s", pyjson.TypeName(pv))
	}
	p, err := s.expandPath(ctx, p)
	if err != nil {
		return nil, err
	}
	if writeDenied(p) {
		return writeResult(0, false, fmt.Sprintf("Write denied: '%s' is a protected system/credential file.", p)), nil
	}
	var in []byte
	hang := false
	switch c := content.(type) {
	case string:
		in = []byte(c)
	default:
		// None and other false values give the command no stdin; a true
		// value of another type is never written and the command waits
		// for its stdin until the time limit.
		hang = pyjson.Truthy(content)
	}
	var steps []step
	parent := dirname(p)
	if parent != "" {
		steps = append(steps, step{cmd: "mkdir -p " + escapeArg(parent)})
	}
	if in == nil {
		in = []byte{}
	}
	steps = append(steps, step{cmd: "cat > " + escapeArg(p), stdin: in, shell: true},
		step{cmd: fmt.Sprintf("wc -c < %s 2>/dev/null", escapeArg(p))})
	r, err := s.run(ctx, s.envTimeout(), 0, steps...)
	if err != nil {
		return nil, err
	}
	dirs := false
	if parent != "" {
		dirs = r[0].code == 0
		r = r[1:]
	}
	// A failed write answers with a fresh WriteResult: dirs_created false.
	if hang {
		return writeResult(0, false, fmt.Sprintf("Failed to write file: Command timed out after %ds", s.t.opts.CommandTimeout)), nil
	}
	if r[0].code != 0 {
		return writeResult(0, false, "Failed to write file: "+r[0].out), nil
	}
	n, ok := pyInt(r[1].out)
	if !ok {
		n = len(in)
	}
	return writeResult(n, dirs, ""), nil
}

// writeFile is write_file_tool.
func (s *Session) writeFile(ctx context.Context, args *pyjson.Object) (reply, error) {
	res, err := s.writeFileOp(ctx, arg(args, "path", ""), arg(args, "content", ""))
	if err != nil {
		if pe, ok := err.(*pyError); ok {
			return errorReply(false, "%s", pe.Msg), nil
		}
		return reply{}, err
	}
	return reply{obj: res}, nil
}

// searchResult is SearchResult.
type searchResult struct {
	matches   []match
	files     []string
	counts    *pyjson.Object
	total     int
	truncated bool
	err       string
}

type match struct {
	path    string
	line    int
	content string
}

func (r searchResult) dict() *pyjson.Object {
	o := pyjson.NewObject().Set("total_count", r.total)
	if len(r.matches) > 0 {
		var l []any
		for _, m := range r.matches {
			l = append(l, pyjson.NewObject().Set("path", m.path).Set("line", m.line).Set("content", m.content))
		}
		o.Set("matches", l)
	}
	if len(r.files) > 0 {
		o.Set("files", r.files)
	}
	if r.counts != nil && r.counts.Len() > 0 {
		o.Set("counts", r.counts)
	}
	if r.truncated {
		o.Set("truncated", true)
	}
	if r.err != "" {
		o.Set("error", r.err)
	}
	return o
}

// searchFiles is search_tool with _handle_search_files' argument mapping.
func (s *Session) searchFiles(ctx context.Context, args *pyjson.Object) (reply, error) {
	pattern := arg(args, "pattern", "")
	target := arg(args, "target", "content")
	switch target.(type) {
	case []any, *pyjson.Object:
		return reply{}, typeErr("unhashable type: '%s'", pyjson.TypeName(target))
	}
	switch target {
	case "grep":
		target = "content"
	case "find":
		target = "files"
	}
	p := arg(args, "path", ".")
	glob := arg(args, "file_glob", nil)
	limit := arg(args, "limit", big.NewInt(50))
	offset := arg(args, "offset", big.NewInt(0))
	mode := arg(args, "output_mode", "content")
	context_ := arg(args, "context", big.NewInt(0))

	var globKey any = ""
	if pyjson.Truthy(glob) {
		globKey = glob
	}
	count := s.track([]any{"search", pattern, target, pyjson.Str(p), globKey, limit, offset})
	if count >= 4 {
		return reply{obj: pyjson.NewObject().Set("error", fmt.Sprintf("BLOCKED: You have run this exact search %d times in a row. "+
			"The results have NOT changed. You already have this information. STOP re-searching and proceed with your task.", count)).
			Set("pattern", pattern).Set("already_searched", count)}, nil
	}
	res, err := s.search(ctx, pattern, p, target, glob, limit, offset, mode, context_)
	if err != nil {
		if pe, ok := err.(*pyError); ok {
			return errorReply(false, "%s", pe.Msg), nil
		}
		return reply{}, err
	}
	for i := range res.matches {
		res.matches[i].content = redact(res.matches[i].content)
	}
	d := res.dict()
	if count >= 3 {
		d.Set("_warning", fmt.Sprintf("You have run this exact search %d times consecutively. The results have not changed. Use the information you already have.", count))
	}
	r := reply{obj: d}
	if res.truncated {
		next, err := pyAdd(offset, limit)
		if err != nil {
			return errorReply(false, "%s", err.Error()), nil
		}
		r.suffix = fmt.Sprintf("\n\n[Hint: Results truncated. Use offset=%s to see more, or narrow with a more specific pattern or file_glob.]", pyjson.Str(next))
	}
	return r, nil
}

// search is ShellFileOperations.search.
func (s *Session) search(ctx context.Context, pattern, pv, target, glob, limit, offset, mode, ctxLines any) (searchResult, error) {
	p, ok := pv.(string)
	if !ok {
		if pyjson.Truthy(pv) {
			return searchResult{}, attrErr(pv, "startswith")
		}
		return searchResult{}, attrErr(pv, "replace")
	}
	p, err := s.expandPath(ctx, p)
	if err != nil {
		return searchResult{}, err
	}
	var tools []string
	for _, t := range []string{"rg", "grep", "find"} {
		if _, ok := s.has[t]; !ok {
			tools = append(tools, t)
		}
	}
	steps := []step{{cmd: fmt.Sprintf("test -e %s && echo exists || echo not_found", escapeArg(p))}}
	for _, t := range tools {
		steps = append(steps, step{cmd: fmt.Sprintf("command -v %s >/dev/null 2>&1 && echo 'yes'", t)})
	}
	r, err := s.run(ctx, s.envTimeout(), 0, steps...)
	if err != nil {
		return searchResult{}, err
	}
	for i, t := range tools {
		s.has[t] = pystr.Strip(r[i+1].out) == "yes"
	}
	if strings.Contains(r[0].out, "not_found") {
		return searchResult{err: fmt.Sprintf("Path not found: %s. Verify the path exists (use 'terminal' to check).", p)}, nil
	}
	if target == "files" {
		return s.searchNames(ctx, pattern, p, limit, offset)
	}
	return s.searchContent(ctx, pattern, p, glob, limit, offset, mode, ctxLines)
}

// searchNames is _search_files: ripgrep's file list when the sandbox has
// ripgrep, else find's (whose -printf format, as hermes writes it, prints
// a backslash and an n where a newline was meant).
func (s *Session) searchNames(ctx context.Context, pv any, p string, limit, offset any) (searchResult, error) {
	pattern, err := argStr(pv, "startswith")
	if err != nil {
		return searchResult{}, err
	}
	sp := pattern
	if strings.HasPrefix(pattern, "**/") || strings.Contains(pattern, "/") {
		sp = pattern[strings.LastIndexByte(pattern, '/')+1:]
	}
	if s.has["rg"] {
		glob := sp
		if !strings.Contains(sp, "/") && !strings.HasPrefix(sp, "*") {
			glob = "*" + sp
		}
		fetch, err := pyAdd(limit, offset)
		if err != nil {
			return searchResult{}, err
		}
		r, err := s.run(ctx, searchTimeout, 0, step{cmd: fmt.Sprintf("rg --files -g %s %s 2>/dev/null | head -n %s", escapeArg(glob), escapeArg(p), pyjson.Str(fetch)), shell: true})
		if err != nil {
			return searchResult{}, err
		}
		all := nonEmpty(strings.Split(pystr.Strip(r[0].out), "\n"))
		stop, err := pyAdd(offset, limit)
		if err != nil {
			return searchResult{}, err
		}
		page, err := pySliceAny(all, offset, stop)
		if err != nil {
			return searchResult{}, err
		}
		trunc, err := pyCompare(big.NewInt(int64(len(all))), ">=", fetch)
		if err != nil {
			return searchResult{}, err
		}
		return searchResult{files: page, total: len(all), truncated: trunc}, nil
	}
	if !s.has["find"] {
		return searchResult{err: "File search requires 'rg' (ripgrep) or 'find'. Install ripgrep for best results: https://github.com/BurntSushi/ripgrep#installation"}, nil
	}
	skip, err := pyAdd(offset, big.NewInt(1))
	if err != nil {
		return searchResult{}, err
	}
	hidden := "-not -path '*/.*'"
	cmd := fmt.Sprintf("find %s %s -type f -name %s -printf '%%T@ %%p\\\\n' 2>/dev/null | sort -rn | tail -n +%s | head -n %s",
		escapeArg(p), hidden, escapeArg(sp), pyjson.Str(skip), pyjson.Str(limit))
	r, err := s.run(ctx, searchTimeout, 0, step{cmd: cmd, shell: true})
	if err != nil {
		return searchResult{}, err
	}
	out := r[0]
	if pystr.Strip(out.out) == "" {
		// The form without -printf, for BSD find.
		fetch, err := pyAdd(limit, offset)
		if err != nil {
			return searchResult{}, err
		}
		cmd = fmt.Sprintf("find %s %s -type f -name %s 2>/dev/null | head -n %s | tail -n +%s",
			escapeArg(p), hidden, escapeArg(sp), pyjson.Str(fetch), pyjson.Str(skip))
		if r, err = s.run(ctx, searchTimeout, 0, step{cmd: cmd, shell: true}); err != nil {
			return searchResult{}, err
		}
		out = r[0]
	}
	var files []string
	for _, line := range strings.Split(pystr.Strip(out.out), "\n") {
		if line == "" {
			continue
		}
		a, b, ok := strings.Cut(line, " ")
		if ok && isDigits(strings.ReplaceAll(a, ".", "")) {
			files = append(files, b)
		} else {
			files = append(files, line)
		}
	}
	return searchResult{files: files, total: len(files)}, nil
}

// searchTimeout is the searches' time limit.
const searchTimeout = 60 * time.Second

// isDigits is str.isdigit.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsDigit(r) && !unicode.Is(unicode.No, r) {
			return false
		}
	}
	return true
}

func nonEmpty(l []string) []string {
	var out []string
	for _, s := range l {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// pySliceAny is l[start:stop] with Python values as bounds.
func pySliceAny[T any](l []T, start, stop any) ([]T, error) {
	i, err := sliceIndex(start)
	if err != nil {
		return nil, err
	}
	if stop == nil {
		return pySlice(l, i, len(l)), nil
	}
	j, err := sliceIndex(stop)
	if err != nil {
		return nil, err
	}
	return pySlice(l, i, j), nil
}

var (
	matchLine = regexp.MustCompile(`^([A-Za-z]:)?(.*?):(\p{Nd}+):(.*)$`)
	ctxLine   = regexp.MustCompile(`^([A-Za-z]:)?(.*?)-(\p{Nd}+)-(.*)$`)
)

// searchContent is _search_content: ripgrep when the sandbox has it, else
// grep.
func (s *Session) searchContent(ctx context.Context, pattern any, p string, glob, limit, offset, mode, ctxLines any) (searchResult, error) {
	rg := s.has["rg"]
	if !rg && !s.has["grep"] {
		return searchResult{err: "Content search requires ripgrep (rg) or grep. Install ripgrep: https://github.com/BurntSushi/ripgrep#installation"}, nil
	}
	cmd, withCtx, err := contentCommand(rg, pattern, p, glob, limit, offset, mode, ctxLines)
	if err != nil {
		return searchResult{}, err
	}
	r, err := s.run(ctx, searchTimeout, 0, step{cmd: cmd, shell: true})
	if err != nil {
		return searchResult{}, err
	}
	out := r[0]
	if out.code == 2 && pystr.Strip(out.out) == "" {
		return searchResult{err: "Search failed: Search error"}, nil
	}
	lines := strings.Split(pystr.Strip(out.out), "\n")
	stop, err := pyAdd(offset, limit)
	if err != nil {
		return searchResult{}, err
	}
	switch mode {
	case "files_only":
		all := nonEmpty(lines)
		page, err := pySliceAny(all, offset, stop)
		if err != nil {
			return searchResult{}, err
		}
		return searchResult{files: page, total: len(all)}, nil
	case "count":
		return countResult(lines), nil
	}
	return matchResult(lines, withCtx, offset, stop)
}

// contentCommand is the shell command of a content search: rg's or
// grep's, its output cut at limit+offset lines (200 more with context);
// withCtx says whether it asks for context lines.
func contentCommand(rg bool, pattern any, p string, glob, limit, offset, mode, ctxLines any) (cmd string, withCtx bool, err error) {
	parts := []string{"grep", "-rnH", "--exclude-dir='.*'"}
	if rg {
		parts = []string{"rg", "--line-number", "--no-heading", "--with-filename"}
	}
	withCtx, err = pyCompare(ctxLines, ">", 0)
	if err != nil {
		return "", false, err
	}
	if withCtx {
		parts = append(parts, "-C", pyjson.Str(ctxLines))
	}
	if pyjson.Truthy(glob) {
		g, err := argStr(glob, "replace")
		if err != nil {
			return "", false, err
		}
		flag := "--include"
		if rg {
			flag = "--glob"
		}
		parts = append(parts, flag, escapeArg(g))
	}
	switch mode {
	case "files_only":
		parts = append(parts, "-l")
	case "count":
		parts = append(parts, "-c")
	}
	pat, err := argStr(pattern, "replace")
	if err != nil {
		return "", false, err
	}
	fetch, err := pyAdd(limit, offset)
	if err != nil {
		return "", false, err
	}
	if withCtx {
		fetch, _ = pyAdd(fetch, big.NewInt(200))
	}
	parts = append(parts, escapeArg(pat), escapeArg(p), "|", "head", "-n", pyjson.Str(fetch))
	return strings.Join(parts, " "), withCtx, nil
}

// countResult reads "path:count" lines (output_mode "count"); a path
// repeated counts once, with its last count.
func countResult(lines []string) searchResult {
	counts := pyjson.NewObject()
	sum := 0
	for _, l := range lines {
		i := strings.LastIndexByte(l, ':')
		if i < 0 {
			continue
		}
		if n, ok := pyInt(l[i+1:]); ok {
			if old, had := counts.Get(l[:i]); had {
				sum -= old.(int)
			}
			counts.Set(l[:i], n)
			sum += n
		}
	}
	return searchResult{counts: counts, total: sum}
}

// matchResult reads "path:line:content" lines (and "path-line-content"
// context lines when withCtx) into the page [offset:stop] of matches.
func matchResult(lines []string, withCtx bool, offset, stop any) (searchResult, error) {
	var ms []match
	for _, l := range lines {
		if l == "" || l == "--" {
			continue
		}
		m := matchLine.FindStringSubmatch(l)
		if m == nil && withCtx {
			m = ctxLine.FindStringSubmatch(l)
		}
		if m == nil {
			continue
		}
		n, _ := pyInt(m[3])
		ms = append(ms, match{path: m[1] + m[2], line: n, content: pystr.Head(m[4], 500)})
	}
	page, err := pySliceAny(ms, offset, stop)
	if err != nil {
		return searchResult{}, err
	}
	trunc, err := pyCompare(big.NewInt(int64(len(ms))), ">", stop)
	if err != nil {
		return searchResult{}, err
	}
	return searchResult{matches: page, total: len(ms), truncated: trunc}, nil
}
