package hermes

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/proctor-dev/proctor/agent/difflib"
	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
)

// linters are file_operations' LINTERS: the syntax check run after an edit.
var linters = map[string]string{
	".py": "python -m py_compile {file} 2>&1",
	".js": "node --check {file} 2>&1",
	".ts": "npx tsc --noEmit {file} 2>&1",
	".go": "go vet {file} 2>&1",
	".rs": "rustfmt --check {file} 2>&1",
}

const lintTimeout = 30 * time.Second

// patchResult is PatchResult.
type patchResult struct {
	success                   bool
	diff                      string
	modified, created, delete []string
	lint                      *pyjson.Object
	err                       string
}

func (r patchResult) dict() *pyjson.Object {
	o := pyjson.NewObject().Set("success", r.success)
	if r.diff != "" {
		o.Set("diff", pyjson.ValidUTF8([]byte(r.diff)))
	}
	if len(r.modified) > 0 {
		o.Set("files_modified", r.modified)
	}
	if len(r.created) > 0 {
		o.Set("files_created", r.created)
	}
	if len(r.delete) > 0 {
		o.Set("files_deleted", r.delete)
	}
	if r.lint != nil && r.lint.Len() > 0 {
		o.Set("lint", r.lint)
	}
	if r.err != "" {
		o.Set("error", r.err)
	}
	return o
}

// patch is patch_tool.
func (s *Session) patch(ctx context.Context, args *pyjson.Object) (reply, error) {
	mode := arg(args, "mode", "replace")
	var res patchResult
	var err error
	switch mode {
	case "replace":
		p := arg(args, "path", nil)
		if !pyjson.Truthy(p) {
			return errorReply(true, "path required"), nil
		}
		old, _ := args.Get("old_string")
		repl, _ := args.Get("new_string")
		if old == nil || repl == nil {
			return errorReply(true, "old_string and new_string required"), nil
		}
		res, err = s.patchReplace(ctx, p, old, repl, pyjson.Truthy(arg(args, "replace_all", false)))
	case "patch":
		text := arg(args, "patch", nil)
		if !pyjson.Truthy(text) {
			return errorReply(true, "patch content required"), nil
		}
		t, ok := text.(string)
		if !ok {
			return errorReply(false, "'%s' object has no attribute 'split'", pyjson.TypeName(text)), nil
		}
		res, err = s.patchV4A(ctx, t)
	default:
		return errorReply(true, "Unknown mode: %s", pyjson.Str(mode)), nil
	}
	if err != nil {
		if pe, ok := err.(*pyError); ok {
			return errorReply(false, "%s", pe.Msg), nil
		}
		return reply{}, err
	}
	r := reply{obj: res.dict()}
	if strings.Contains(res.err, "Could not find") {
		r.suffix = "\n\n[Hint: old_string not found. Use read_file to verify the current content, or search_files to locate the text.]"
	}
	return r, nil
}

// readAll is `cat path 2>/dev/null`: the whole file, or false.
func (s *Session) readAll(ctx context.Context, p string) (string, bool, error) {
	r, err := s.run(ctx, s.envTimeout(), maxEditBytes, step{cmd: fmt.Sprintf("cat %s 2>/dev/null", escapeArg(p))})
	if err != nil {
		return "", false, err
	}
	return r[0].out, r[0].code == 0, nil
}

// maxEditBytes bounds the files the patch tool edits.
const maxEditBytes = 64 << 20

// patchReplace is ShellFileOperations.patch_replace.
func (s *Session) patchReplace(ctx context.Context, pv, old, repl any, all bool) (patchResult, error) {
	p, err := argStr(pv, "startswith")
	if err != nil {
		return patchResult{}, err
	}
	if p, err = s.expandPath(ctx, p); err != nil {
		return patchResult{}, err
	}
	if writeDenied(p) {
		return patchResult{err: fmt.Sprintf("Write denied: '%s' is a protected system/credential file.", p)}, nil
	}
	content, ok, err := s.readAll(ctx, p)
	if err != nil {
		return patchResult{}, err
	}
	if !ok {
		return patchResult{err: "Failed to read file: " + p}, nil
	}
	o, isStr := old.(string)
	n, nIsStr := repl.(string)
	switch {
	case !pyjson.Truthy(old):
		return patchResult{err: "old_string cannot be empty"}, nil
	case pyEqual(old, repl):
		return patchResult{err: "old_string and new_string are identical"}, nil
	case !isStr:
		return patchResult{}, typeErr("must be str, not %s", pyjson.TypeName(old))
	}
	if !nIsStr {
		n = "\x00" // only to learn whether a replacement would be made
	}
	updated, count, msg, err := fuzzyReplace(content, o, n, all)
	if err != nil {
		return patchResult{}, err
	}
	if msg != "" {
		return patchResult{err: msg}, nil
	}
	if !nIsStr {
		return patchResult{}, typeErr(`can only concatenate str (not "%s") to str`, pyjson.TypeName(repl))
	}
	if count == 0 {
		return patchResult{err: "Could not find match for old_string in " + p}, nil
	}
	lint, werr, err := s.writeAndLint(ctx, p, updated)
	if err != nil {
		return patchResult{}, err
	}
	if werr != "" {
		return patchResult{err: "Failed to write changes: " + werr}, nil
	}
	return patchResult{success: true, diff: unifiedDiff(content, updated, p), modified: []string{p}, lint: lint}, nil
}

func unifiedDiff(a, b, name string) string {
	return difflib.UnifiedDiff(pystr.SplitLines(a, true), pystr.SplitLines(b, true), "a/"+name, "b/"+name)
}

// writeAndLint writes a file as write_file does and checks its syntax, in
// one sandbox call; it returns the lint result (nil when lint is false) or
// the write's error.
func (s *Session) writeAndLint(ctx context.Context, p, content string) (*pyjson.Object, string, error) {
	res, err := s.writeFileOp(ctx, p, content)
	if err != nil {
		return nil, "", err
	}
	if e, ok := res.Get("error"); ok {
		return nil, e.(string), nil
	}
	lint, err := s.lint(ctx, p)
	return lint, "", err
}

// lint is _check_lint.
func (s *Session) lint(ctx context.Context, p string) (*pyjson.Object, error) {
	ext := strings.ToLower(splitExt(p))
	cmd, ok := linters[ext]
	if !ok {
		return pyjson.NewObject().Set("status", "skipped").Set("message", fmt.Sprintf("No linter for %s files", ext)), nil
	}
	base, _, _ := strings.Cut(cmd, " ")
	has, err := s.hasCommand(ctx, base)
	if err != nil {
		return nil, err
	}
	if !has {
		return pyjson.NewObject().Set("status", "skipped").Set("message", base+" not available"), nil
	}
	rs, err := s.run(ctx, lintTimeout, 0, step{cmd: strings.ReplaceAll(cmd, "{file}", escapeArg(p)), shell: true})
	if err != nil {
		return nil, err
	}
	r := rs[0]
	status := "ok"
	if r.code != 0 {
		status = "error"
	}
	return pyjson.NewObject().Set("status", status).Set("output", pystr.Strip(r.out)), nil
}

// v4aApply is how apply_v4a_operations handles one kind of operation: the
// function that applies it, the verb of its failure message, and the list
// a success goes to.
type v4aApply struct {
	apply func(*Session, context.Context, patchOp) (bool, string, error)
	verb  string
	done  func(*patchResult, patchOp)
}

var v4aApplies = map[opKind]v4aApply{
	opAdd:    {(*Session).v4aAdd, "add", func(r *patchResult, op patchOp) { r.created = append(r.created, op.path) }},
	opDelete: {(*Session).v4aDelete, "delete", func(r *patchResult, op patchOp) { r.delete = append(r.delete, op.path) }},
	opMove:   {(*Session).v4aMove, "move", func(r *patchResult, op patchOp) { r.modified = append(r.modified, op.path+" -> "+op.newPath) }},
	opUpdate: {(*Session).v4aUpdate, "update", func(r *patchResult, op patchOp) { r.modified = append(r.modified, op.path) }},
}

// patchV4A is patch_v4a: parse, then apply_v4a_operations.
func (s *Session) patchV4A(ctx context.Context, text string) (patchResult, error) {
	var res patchResult
	var diffs, errs []string
	for _, op := range parseV4A(text) {
		a := v4aApplies[op.kind]
		ok, out, err := a.apply(s, ctx, op)
		switch pe, isPy := err.(*pyError); {
		case err != nil && !isPy:
			return patchResult{}, err
		case err != nil:
			errs = append(errs, "Error processing "+op.path+": "+pe.Msg)
		case ok:
			a.done(&res, op)
			diffs = append(diffs, out)
		default:
			errs = append(errs, "Failed to "+a.verb+" "+op.path+": "+out)
		}
	}
	for _, f := range append(append([]string{}, res.modified...), res.created...) {
		l, err := s.lint(ctx, f)
		if err != nil {
			return patchResult{}, err
		}
		if res.lint == nil {
			res.lint = pyjson.NewObject()
		}
		res.lint.Set(f, l)
	}
	res.diff = strings.Join(diffs, "\n")
	res.success = len(errs) == 0
	res.err = strings.Join(errs, "; ")
	return res, nil
}

func (s *Session) v4aAdd(ctx context.Context, op patchOp) (bool, string, error) {
	var lines []string
	for _, h := range op.hunks {
		for _, l := range h.lines {
			if l.prefix == '+' {
				lines = append(lines, l.content)
			}
		}
	}
	res, err := s.writeFileOp(ctx, op.path, strings.Join(lines, "\n"))
	if err != nil {
		return false, "", err
	}
	if e, ok := res.Get("error"); ok {
		return false, e.(string), nil
	}
	diff := "--- /dev/null\n+++ b/" + op.path + "\n"
	for i, l := range lines {
		if i > 0 {
			diff += "\n"
		}
		diff += "+" + l
	}
	return true, diff, nil
}

// exists is read_file's existence check (wc -c succeeds), after ~
// expansion.
func (s *Session) exists(ctx context.Context, p string) (string, bool, error) {
	p, err := s.expandPath(ctx, p)
	if err != nil {
		return "", false, err
	}
	r, err := s.run1(ctx, s.envTimeout(), fmt.Sprintf("wc -c < %s 2>/dev/null", escapeArg(p)))
	if err != nil {
		return "", false, err
	}
	return p, r.code == 0, nil
}

func (s *Session) v4aDelete(ctx context.Context, op patchOp) (bool, string, error) {
	_, ok, err := s.exists(ctx, op.path)
	if err != nil {
		return false, "", err
	}
	if !ok {
		return true, "# " + op.path + " already deleted or doesn't exist", nil
	}
	r, err := s.run1(ctx, s.envTimeout(), "rm -f "+escapeArg(op.path))
	if err != nil {
		return false, "", err
	}
	if r.code != 0 {
		return false, r.out, nil
	}
	return true, "--- a/" + op.path + "\n+++ /dev/null\n# File deleted", nil
}

func (s *Session) v4aMove(ctx context.Context, op patchOp) (bool, string, error) {
	r, err := s.run1(ctx, s.envTimeout(), "mv "+escapeArg(op.path)+" "+escapeArg(op.newPath))
	if err != nil {
		return false, "", err
	}
	if r.code != 0 {
		return false, r.out, nil
	}
	return true, "# Moved: " + op.path + " -> " + op.newPath, nil
}

// v4aUpdate is _apply_update. hermes reads the file through read_file
// (at most 2,000 lines of at most 2,000 characters) and writes back what it
// read, so the rest of a longer file is lost; proctor edits the whole file.
func (s *Session) v4aUpdate(ctx context.Context, op patchOp) (bool, string, error) {
	p, err := s.expandPath(ctx, op.path)
	if err != nil {
		return false, "", err
	}
	q := escapeArg(p)
	r, err := s.run(ctx, s.envTimeout(), maxEditBytes,
		step{cmd: fmt.Sprintf("wc -c < %s 2>/dev/null", q)},
		step{cmd: fmt.Sprintf("head -c 1000 %s 2>/dev/null", q)},
		step{cmd: fmt.Sprintf("cat %s 2>/dev/null", q)})
	if err != nil {
		return false, "", err
	}
	ext := strings.ToLower(splitExt(p))
	current := ""
	switch {
	case r[0].code != 0:
		return false, "Cannot read file: File not found: " + p, nil
	case imageExt[ext]:
		// read_file gives an image no content and no error.
	case binaryExt[ext] || likelyBinary(r[1].out):
		return false, "Cannot read file: Binary file - cannot display as text. Use appropriate tools to handle this file type.", nil
	case r[2].code == 0:
		current = r[2].out
	}
	content := current
	for _, h := range op.hunks {
		var search, repl []string
		for _, l := range h.lines {
			switch l.prefix {
			case ' ':
				search = append(search, l.content)
				repl = append(repl, l.content)
			case '-':
				search = append(search, l.content)
			case '+':
				repl = append(repl, l.content)
			}
		}
		if len(search) == 0 {
			// An addition-only hunk goes after the hint's line, or at the
			// end.
			ins := strings.Join(repl, "\n")
			at := -1
			if h.hint != nil {
				at = strings.Index(content, *h.hint)
			}
			switch {
			case at < 0:
				content = strings.TrimRight(content, "\n") + "\n" + ins + "\n"
			case strings.IndexByte(content[at:], '\n') >= 0:
				eol := at + strings.IndexByte(content[at:], '\n')
				content = content[:eol+1] + ins + "\n" + content[eol+1:]
			default:
				content = content + "\n" + ins
			}
			continue
		}
		pat, rep := strings.Join(search, "\n"), strings.Join(repl, "\n")
		updated, count, msg, err := fuzzyReplace(content, pat, rep, false)
		if err != nil {
			return false, "", err
		}
		if msg != "" && count == 0 && h.hint != nil {
			if at := strings.Index(content, *h.hint); at >= 0 {
				// A window of 500 characters before the hint and 2,000
				// after.
				ws, we := runeOffset(content, at, -500), runeOffset(content, at, 2000)
				w, c, m, err := fuzzyReplace(content[ws:we], pat, rep, false)
				if err != nil {
					return false, "", err
				}
				msg = m
				if c > 0 {
					updated, msg = content[:ws]+w+content[we:], ""
				}
			}
		}
		if msg != "" {
			return false, "Could not apply hunk: " + msg, nil
		}
		content = updated
	}
	res2, err := s.writeFileOp(ctx, op.path, content)
	if err != nil {
		return false, "", err
	}
	if e, ok := res2.Get("error"); ok {
		return false, e.(string), nil
	}
	return true, unifiedDiff(current, content, op.path), nil
}

// runeOffset moves n characters from byte offset at (back when n < 0),
// stopping at the text's ends.
func runeOffset(s string, at, n int) int {
	for ; n < 0 && at > 0; n++ {
		_, w := utf8.DecodeLastRuneInString(s[:at])
		at -= w
	}
	for ; n > 0 && at < len(s); n-- {
		_, w := utf8.DecodeRuneInString(s[at:])
		at += w
	}
	return at
}
