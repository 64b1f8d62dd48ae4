package report

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func writeHTML(t testing.TB, dir string, opt HTMLOptions) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, dir, opt); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// checkInert checks that the page has exactly its own script elements and
// refers to nothing outside itself.
func checkInert(t *testing.T, page string, rollouts int) {
	t.Helper()
	lower := strings.ToLower(page)
	if n := strings.Count(lower, "<script"); n != rollouts+2 {
		t.Errorf("page has %d <script tags, want %d (rows, one per rollout, the script)", n, rollouts+2)
	}
	if n := strings.Count(lower, "</script"); n != rollouts+2 {
		t.Errorf("page has %d </script tags, want %d", n, rollouts+2)
	}
	attr := regexp.MustCompile(`\s([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?`)
	tag := regexp.MustCompile(`<[a-zA-Z][^\s/>]*(?:\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?)*\s*/?>`)
	refs := 0
	for _, tg := range tag.FindAllString(page, -1) {
		for _, m := range attr.FindAllStringSubmatch(tg, -1) {
			name, value := strings.ToLower(m[1]), html.UnescapeString(m[2]+m[3]+m[4])
			if strings.HasPrefix(name, "on") || name == "style" {
				t.Errorf("page has a %s attribute: %s", name, tg)
			}
			switch name {
			case "src", "href", "action", "formaction", "srcset", "xlink:href", "poster", "data", "background":
				refs++
				if !strings.HasPrefix(value, "#") {
					t.Errorf("page refers to %q (%s): it must be self-contained", value, name)
				}
			}
		}
	}
	if rollouts > 0 && refs == 0 {
		t.Error("found no links to rollouts: the check of attributes sees nothing")
	}
	for _, s := range []string{"<link", "@import", "url(", "<iframe", "<object", "<embed"} {
		if strings.Contains(lower, s) {
			t.Errorf("page contains %q", s)
		}
	}
}

// csp is the page's Content-Security-Policy.
func csp(page string) string {
	m := regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="([^"]*)">`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// details decodes the block of rollout i as the page's script does.
func details(t *testing.T, page string, i int) map[string]any {
	t.Helper()
	m := regexp.MustCompile(`<script type="text/x-gzip-base64" id="t-` + strconv.Itoa(i) + `">([^<]*)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no block t-%d", i)
	}
	b, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := io.ReadAll(zr)
	line, rest, _ := bytes.Cut(js, []byte("\n"))
	var d map[string]any
	if err := json.Unmarshal(line, &d); err != nil {
		t.Fatalf("block t-%d: %v", i, err)
	}
	if len(rest) > 0 {
		var tr any
		if err := json.Unmarshal(rest, &tr); err != nil {
			d["transcript_text"] = string(rest)
		} else {
			d["transcript"] = tr
		}
	}
	return d
}

func TestWriteHTMLIsSelfContainedAndEscaped(t *testing.T) {
	dir := t.TempDir()
	s := fixture{tasks: 6, attempts: 3, turns: 4, finished: true, hostile: true}.write(t, dir)
	page := writeHTML(t, dir, HTMLOptions{})
	checkInert(t, page, s.Rollouts)
	for _, bad := range []string{hostileScript, hostileHTML, "<script>window.pwned", "<img src=x"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q unescaped", bad)
		}
	}
	// The script and style may run only because their hashes are listed.
	for _, want := range []string{"default-src 'none'", "connect-src 'none'", "script-src '" + hash(pageJS) + "'", "style-src '" + hash(pageCSS) + "'"} {
		if !strings.Contains(csp(page), want) {
			t.Errorf("Content-Security-Policy lacks %s", want)
		}
	}
	if !strings.Contains(page, "<script>"+pageJS+"</script>") || !strings.Contains(page, "<style>"+pageCSS+"</style>") {
		t.Error("the inline script or style differs from the hashed one")
	}
	if strings.Contains(pageJS, "<") && strings.Contains(strings.ToLower(pageJS), "</script") {
		t.Error("report.js contains </script")
	}
	for _, want := range []string{
		`id="n-rollouts">18<`, `id="n-tasks">6<`, "pass@3", "Pass rate per category", `href="#r-17"`,
		"evil&lt;/script&gt;&lt;script&gt;window.pwned = 1&lt;/script&gt;",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	m := regexp.MustCompile(`id="pass-rate" data-value="([^"]+)">([^<]+)<`).FindStringSubmatch(page)
	if m == nil || m[1] != strconv.FormatFloat(s.PassRate, 'g', -1, 64) || m[2] != percent(s.PassRate) {
		t.Errorf("pass rate shown as %q, want %v and %s", m, s.PassRate, percent(s.PassRate))
	}
	if strings.Contains(page, `id="in-progress"`) {
		t.Error("a finished run is shown as in progress")
	}

	// Rollout 3 is task 1 (hostile), attempt 0: its text survives intact.
	d := details(t, page, 3)
	rec := d["record"].(map[string]any)
	if rec["task_id"] != "evil"+hostileScript || rec["category"] != "cat"+hostileHTML {
		t.Errorf("record of rollout 3: %v", rec)
	}
	msgs := d["transcript"].(map[string]any)["trajectory"].(map[string]any)["messages"].([]any)
	if c := msgs[2].(map[string]any)["content"].(string); !strings.Contains(c, hostileScript+" "+hostileHTML) {
		t.Errorf("assistant message: %q", c)
	}
}

func TestWriteHTMLRunInProgress(t *testing.T) {
	dir := t.TempDir()
	s := fixture{tasks: 3, attempts: 2, turns: 2}.write(t, dir)
	// The runner is writing the next line.
	f, _ := os.OpenFile(filepath.Join(dir, rundir.ResultsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"rollout_id":"task-0003#0","task_id":"task-00`)
	f.Close()

	page := writeHTML(t, dir, HTMLOptions{})
	checkInert(t, page, s.Rollouts)
	if !strings.Contains(page, `id="in-progress"`) || strings.Contains(page, "data-live") {
		t.Error("a run without finished_at is not shown as in progress, or a file claims to be live")
	}
	live := writeHTML(t, dir, HTMLOptions{Live: true})
	for _, want := range []string{`data-live="1"`, `<meta http-equiv="refresh"`, "This page reloads"} {
		if !strings.Contains(live, want) {
			t.Errorf("live page lacks %s", want)
		}
	}
	if !strings.Contains(csp(live), "connect-src 'self'") {
		t.Error("a live page may not ask for its status")
	}
	st, err := ReadStatus(dir)
	if err != nil || st != (Status{Rollouts: 6}) {
		t.Fatalf("ReadStatus = %+v, %v", st, err)
	}
}

func TestWriteHTMLOddRunDirectories(t *testing.T) {
	dir := t.TempDir()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// An oracle transcript, one that is not JSON, one outside the run
	// directory, one missing, and none at all.
	os.WriteFile(filepath.Join(dir, "transcripts", "oracle.json"), []byte(`{"prompt":"p","trajectory":{"agent":"oracle","messages":null,"stop_reason":"oracle"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "transcripts", "torn.json"), []byte(`{"prompt":`), 0o644)
	for i, tr := range []string{"transcripts/oracle.json", "transcripts/torn.json", "../../etc/passwd", "transcripts/gone.json", ""} {
		store.Append(rundir.Record{RolloutID: "t#" + strconv.Itoa(i), TaskID: "t", Attempt: i, Outcome: rundir.OutcomeFailed, Transcript: tr})
	}
	store.Close()

	page := writeHTML(t, dir, HTMLOptions{})
	checkInert(t, page, 5)
	if strings.Count(page, "(missing)") != 2 {
		t.Error("missing config.toml and manifest.json are not shown as missing")
	}
	if d := details(t, page, 0); d["transcript"].(map[string]any)["prompt"] != "p" {
		t.Errorf("oracle transcript: %v", d)
	}
	if d := details(t, page, 1); d["transcript_text"] != `{"prompt":` {
		t.Errorf("a transcript that is not JSON is not passed on as it is: %v", d)
	}
	for i, want := range map[int]string{2: "outside transcripts/", 3: "no such file"} {
		if d := details(t, page, i); d["transcript"] != nil || !strings.Contains(d["transcript_error"].(string), want) {
			t.Errorf("rollout %d: want transcript error %q, got %v", i, want, d["transcript_error"])
		}
	}
	if d := details(t, page, 4); d["transcript"] != nil || d["transcript_error"] != nil {
		t.Errorf("rollout without transcript: %v", d)
	}

	err = WriteHTML(io.Discard, t.TempDir(), HTMLOptions{})
	if err == nil || !strings.Contains(err.Error(), "has no results.jsonl") {
		t.Errorf("directory without results: %v", err)
	}
}

// FuzzWriteHTML puts arbitrary text where a run's untrusted text goes and
// checks that the page still has only its own script elements.
func FuzzWriteHTML(f *testing.F) {
	f.Add("task", "cat", "error", "output", []byte(`{"trajectory":{"messages":[]}}`))
	f.Add(hostileScript, hostileHTML, "<!--", "<script", []byte(`"`+hostileScript+`"`))
	f.Add("a\u2028b", "</ScRiPt >", "]]>", "\x00\xff", []byte("\xff"))
	f.Fuzz(func(t *testing.T, task, cat, errText, output string, transcript []byte) {
		if task == "" {
			task = "x"
		}
		dir := t.TempDir()
		store, err := rundir.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "transcripts", "a.json"), transcript, 0o644)
		store.Append(rundir.Record{RolloutID: task + "#0", TaskID: task, Category: cat, Outcome: cat, ErrorClass: cat, Error: errText,
			VerifierOutput: output, Tests: []abi.TestResult{{Name: cat, Status: output}}, Phases: map[string]float64{cat: 1}, Transcript: "transcripts/a.json"})
		store.Close()
		os.WriteFile(filepath.Join(dir, rundir.ConfigFile), []byte(output), 0o644)
		os.WriteFile(filepath.Join(dir, rundir.ManifestFile), []byte(`{"name":`+strconv.Quote(task)+`}`), 0o644)
		checkInert(t, writeHTML(t, dir, HTMLOptions{}), 1)
	})
}

// TestWriteHTMLOneRollout: counts of one read in the singular.
func TestWriteHTMLOneRollout(t *testing.T) {
	dir := t.TempDir()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	store.Append(rundir.Record{RolloutID: "t#0", TaskID: "t", Outcome: rundir.OutcomePassed})
	store.Close()
	text := strings.Join(strings.Fields(html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(writeHTML(t, dir, HTMLOptions{}), " "))), " ")
	for _, want := range []string{"over 1 rollout of 1 task (up to 1 attempt each)", "1 rollout recorded so far"} {
		if !strings.Contains(text, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	var buf bytes.Buffer
	if err := Write(&buf, Summarize(store.Records()), "text"); err != nil || !strings.Contains(buf.String(), "rollouts   1 (1 task x up to 1 attempt)") {
		t.Errorf("text report: %v\n%s", err, buf.String())
	}
}
