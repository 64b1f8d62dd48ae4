package report

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/proctor-dev/proctor/host/rundir"
)

// chromiumPath is Debian's chromium; PROCTOR_CHROMIUM names another.
func chromiumPath() string {
	if p := os.Getenv("PROCTOR_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// tab is a page of a headless Chromium that records every request it makes
// and every error it logs.
type tab struct {
	ctx      context.Context
	mu       sync.Mutex
	requests []string
	errors   []string
}

// newBrowser starts Chromium, or skips without one unless
// PROCTOR_REQUIRE_BROWSER=1.
func newBrowser(tb testing.TB) context.Context {
	tb.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("PROCTOR_REQUIRE_BROWSER") == "1" {
			tb.Fatalf("PROCTOR_REQUIRE_BROWSER=1 but there is no browser at %s: apt-get install -y chromium", path)
		}
		tb.Skipf("no browser at %s (apt-get install -y chromium, or set PROCTOR_CHROMIUM)", path)
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-background-networking", true),
		// Its own temporary folder: Chromium leaves folders behind in it.
		chromedp.UserDataDir(tb.TempDir()), chromedp.Env("TMPDIR="+tb.TempDir()))
	tb.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	tb.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// newTab opens a tab of the browser.
func newTab(tb testing.TB, browser context.Context) *tab {
	tb.Helper()
	t := &tab{}
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithListener(func(ev any) {
		t.mu.Lock()
		defer t.mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			t.requests = append(t.requests, ev.Request.URL)
		}
	}))
	tb.Cleanup(cancel)
	t.ctx = ctx
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		tb.Fatal(err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				t.mu.Lock()
				t.errors = append(t.errors, m.String())
				t.mu.Unlock()
			}
		}
	}()
	return t
}

// checkOffline fails on any request that is not for the page itself: a
// file, data, or a URL with one of the prefixes.
func (t *tab) checkOffline(tb testing.TB, prefixes ...string) {
	tb.Helper()
	prefixes = append(prefixes, "file://", "data:")
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.requests) == 0 {
		tb.Error("saw no request at all: the listener does not work")
	}
	for _, u := range t.requests {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(u, p) }) {
			tb.Errorf("the page made a network request: %s", u)
		}
	}
	for _, e := range t.errors {
		tb.Errorf("the page logged an error: %s", e)
	}
}

func run[T any](tb testing.TB, ctx context.Context, a chromedp.Action[T]) T {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func do(tb testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	tb.Helper()
	run(tb, ctx, chromedp.Steps(steps...))
}

// saveArtifact writes a file under the test's temporary folder, and under
// $PROCTOR_ARTIFACTS when it is set.
func saveArtifact(t *testing.T, name string, data []byte) {
	dirs := []string{t.TempDir()}
	if d := os.Getenv("PROCTOR_ARTIFACTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", p)
	}
}

func writeReportFile(tb testing.TB, dir string) string {
	tb.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, dir, HTMLOptions{}); err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

func fileURL(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }

// setValue sets the value of a form field as a user would.
func setValue(id, value, event string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(e => { e.value = %q; e.dispatchEvent(new Event(%q)) })(document.getElementById(%q))`, value, event, id))
}

// markup is what of a document could have come from text of a run taken
// as HTML: script elements, elements of kinds the page never makes, and
// event handler attributes.
type markup struct {
	Scripts  int      `json:"scripts"`
	Foreign  []string `json:"foreign"`
	Handlers int      `json:"handlers"`
}

// readMarkup is a function of a document that returns its markup.
const readMarkup = `(doc => {
  const own = new Set(['html', 'head', 'meta', 'title', 'style', 'body', 'header', 'main', 'section', 'h1', 'h2', 'h3',
    'p', 'strong', 'span', 'div', 'dl', 'dt', 'dd', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'a', 'input', 'select',
    'option', 'button', 'details', 'summary', 'pre', 'script', 'noscript', 'svg', 'g', 'text', 'rect']);
  const all = [...doc.querySelectorAll('*')];
  return {
    scripts: doc.querySelectorAll('script').length,
    foreign: all.map(e => e.localName).filter(n => !own.has(n)),
    handlers: all.filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
  };
})`

// marksWithoutGlyph lists the outcome marks (legend, outcome counts, grid,
// table) that the browser draws the same as a private-use character, that
// is as the box of a glyph no font has.
const marksWithoutGlyph = `(() => {
  const shown = document.querySelectorAll('.legend .pill, .pill[id^=count-], table.grid td.cell a, #table td[class^=o-]');
  const marks = new Set([...shown].map(e => e.textContent.trim().split(' ')[0]));
  const g = Object.assign(document.createElement('canvas'), { width: 64, height: 64 }).getContext('2d');
  g.font = getComputedStyle(shown[0]).font;
  const draw = s => { g.clearRect(0, 0, 64, 64); g.fillText(s, 8, 40); return g.getImageData(0, 0, 64, 64).data.join(); };
  const box = draw('\uE000');
  return marks.size < 4 ? ['(found only ' + [...marks].join(' ') + ')'] : [...marks].filter(m => draw(m) === box);
})()`

// controlsShown lists the ids of the table's controls that are on screen.
const controlsShown = `['filter', 'outcome', 'prev', 'next'].filter(id => document.getElementById(id).checkVisibility())`

// visibleRows counts the rows of the table: the script draws only the
// rows of the page shown.
const visibleRows = `document.querySelectorAll('#table tbody tr').length`

func TestBrowserReport(t *testing.T) {
	browser := newBrowser(t)
	dir := t.TempDir()
	fixture{tasks: 40, attempts: 3, turns: 5, finished: true, hostile: true}.write(t, dir)
	var s Summary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	page := fileURL(writeReportFile(t, dir))

	tb := newTab(t, browser)
	ctx := tb.ctx
	do(t, ctx, chromedp.Navigate(page), chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1'`))
	if shown := run(t, ctx, chromedp.Evaluate[[]string](controlsShown)); len(shown) != 4 {
		t.Errorf("with JavaScript the page shows the controls %v, want the filter, the outcome menu and the page buttons", shown)
	}

	// The numbers the page shows are those of summary.json.
	if len(s.PassAtK) == 0 || len(s.ErrorClasses) == 0 || len(s.Categories) < 2 {
		t.Fatalf("the fixture's summary has no pass@k, no infra errors or one category: the check would miss them")
	}
	checkShownSummary(t, ctx, s)
	// Phases are listed in the order they happen, in the summary and in
	// the table's columns.
	if got := run(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#phases tbody th')].map(e => e.textContent)`)); !slices.Equal(got, runnerPhases) {
		t.Errorf("phase table lists %v, want %v", got, runnerPhases)
	}
	if got := run(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#table thead th')].map(e => e.textContent).filter(h => / s$/.test(h) && h !== 'total s').map(h => h.slice(0, -2))`)); !slices.Equal(got, runnerPhases) {
		t.Errorf("table has the phase columns %v, want %v", got, runnerPhases)
	}
	// The outcome marks are drawn with a font that has them.
	if missing := run(t, ctx, chromedp.Evaluate[[]string](marksWithoutGlyph)); len(missing) > 0 {
		t.Errorf("the marks %q are drawn as the missing-glyph box: no font here has them", missing)
	}
	checkTable(t, ctx, s)
	checkHostileRollout(t, browser, ctx, s)
	saveArtifact(t, "report-trajectory.png", run(t, ctx, chromedp.CaptureScreenshot()))
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById('grid').scrollIntoView()`))
	saveArtifact(t, "report-grid.png", run(t, ctx, chromedp.CaptureScreenshot()))
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById('rollouts').scrollIntoView()`))
	saveArtifact(t, "report-table.png", run(t, ctx, chromedp.CaptureScreenshot()))
	tb.checkOffline(t)

	checkWithoutScript(t, browser, page, s)
}

// checkTable pages, filters and sorts the table of rollouts of the
// fixture whose summary is s.
func checkTable(t *testing.T, ctx context.Context, s Summary) {
	// 120 rollouts: a page of 100 rows, then one of 20.
	if got := run(t, ctx, chromedp.Evaluate[int](visibleRows)); got != 100 {
		t.Errorf("table shows %d rows, want a page of 100", got)
	}
	if got := run(t, ctx, chromedp.Text(chromedp.ID("shown"))); got != fmt.Sprintf("%d of %d rollouts", s.Rollouts, s.Rollouts) {
		t.Errorf("count of rows says %q", got)
	}
	do(t, ctx, chromedp.Click(chromedp.ID("next")))
	if got, page := run(t, ctx, chromedp.Evaluate[int](visibleRows)), run(t, ctx, chromedp.Text(chromedp.ID("page"))); got != s.Rollouts-100 || page != "page 2 of 2" {
		t.Errorf("second page shows %d rows and says %q", got, page)
	}
	do(t, ctx, chromedp.Click(chromedp.ID("prev")))

	// Filtering by typing, and by outcome.
	do(t, ctx, chromedp.SendKeys(chromedp.ID("filter"), "networking"))
	if got, want := run(t, ctx, chromedp.Evaluate[int](visibleRows)), s.Categories["networking"].N; got != want || want == 0 {
		t.Errorf("filter networking: %d rows shown, want %d", got, want)
	}
	if got := run(t, ctx, chromedp.Text(chromedp.ID("shown"))); got != fmt.Sprintf("%d of %d rollouts", s.Categories["networking"].N, s.Rollouts) {
		t.Errorf("count of shown rows says %q", got)
	}
	do(t, ctx, setValue("filter", "", "input"), setValue("outcome", "passed", "change"))
	if got := run(t, ctx, chromedp.Evaluate[int](visibleRows)); got != s.Outcomes["passed"] {
		t.Errorf("outcome passed: %d rows shown, want %d", got, s.Outcomes["passed"])
	}
	do(t, ctx, setValue("outcome", "", "change"))

	// Sorting: the table starts sorted up by "#"; a click on it turns the
	// order round.
	do(t, ctx, chromedp.Click(chromedp.CSS(`#table th[data-col="0"]`)))
	if got := run(t, ctx, chromedp.Evaluate[string](`document.querySelector('#table tbody tr').dataset.i`)); got != fmt.Sprint(s.Rollouts-1) {
		t.Errorf("sorted down by #, the first row is %s", got)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`#table th[data-col="0"]`)))
}

// checkHostileRollout opens the rollout with hostile text and checks that
// it shows as text everywhere, never as markup.
func checkHostileRollout(t *testing.T, browser context.Context, ctx context.Context, s Summary) {
	// Open the rollout with hostile text (task 1, attempt 0, index 3).
	do(t, ctx, chromedp.Click(chromedp.CSS(`#table tbody tr[data-i="3"]`)),
		chromedp.Poll[chromedp.Void](`document.getElementById('detail').dataset.rollout === '3'`))
	text := run(t, ctx, chromedp.TextContent(chromedp.ID("detail")))
	for _, want := range []string{
		`"command": "cd /app && pytest -q tests/test_fix.py -k case_0"`, // a tool call's arguments
		"→ terminal", "test_output_content", "2 passed in 0.12s", "All tests pass now.",
		"Stacked rewards", "judge" + hostileHTML, "score 7", "error: plugin trapreward hook reward.score: trap", // stacked rewards
		hostileScript, hostileHTML, // shown as text
	} {
		if !strings.Contains(text, want) {
			t.Errorf("trajectory lacks %q", want)
		}
	}
	// The hostile text is in the open trajectory, the table, the grid and
	// the chart. (The page's Content-Security-Policy would stop an injected
	// script from running, so look for the elements it would make.)
	if got := run(t, ctx, chromedp.Evaluate[markup](readMarkup+`(document)`)); got.Scripts != s.Rollouts+2 || len(got.Foreign) > 0 || got.Handlers > 0 {
		t.Errorf("text from the run became markup: the page has %+v, want only its %d scripts (the rows, one block per rollout, the script)", got, s.Rollouts+2)
	}
	// The check sees such markup where there is some: the hostile text
	// taken as HTML, in an inert template of a blank page (whose lack of a
	// Content-Security-Policy keeps Chromium from logging the handler).
	blank := newTab(t, browser)
	hostile, _ := json.Marshal("<b>bold</b>" + hostileScript + hostileHTML)
	do(t, blank.ctx, chromedp.Navigate("about:blank"))
	if got := run(t, blank.ctx, chromedp.Evaluate[markup](readMarkup+`(Object.assign(document.createElement('template'), {innerHTML: `+string(hostile)+`}).content)`)); got.Scripts != 1 || !slices.Equal(got.Foreign, []string{"b", "img"}) || got.Handlers != 1 {
		t.Errorf("the check of markup sees %+v in the hostile text taken as HTML", got)
	}
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#detail details.reasoning:not([open])').length`)); n != 5 {
		t.Errorf("%d collapsed reasoning blocks, want 5", n)
	}
	if n := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('#detail .msg.tool details.clip:not([open])').length`)); n != 5 {
		t.Errorf("%d collapsed tool outputs, want 5", n)
	}
}

// checkWithoutScript opens page in a tab without JavaScript: the summary
// is still there, and the controls the script drives are not.
func checkWithoutScript(t *testing.T, browser context.Context, page string, s Summary) {
	nojs := newTab(t, browser)
	if _, err := chromedp.Call(nojs.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	do(t, nojs.ctx, chromedp.Navigate(page))
	// The script did not run: it would have marked the page ready and
	// filled the table.
	if ran := run(t, nojs.ctx, chromedp.Evaluate[bool](`document.body.dataset.ready !== undefined || document.querySelector('#table tbody').children.length > 0`)); ran {
		t.Fatal("the page's script ran in the tab without JavaScript")
	}
	// The controls the script drives are not shown: they would do nothing.
	if shown := run(t, nojs.ctx, chromedp.Evaluate[[]string](controlsShown)); len(shown) != 0 {
		t.Errorf("without JavaScript the page shows controls that do nothing: %v", shown)
	}
	if got := run(t, nojs.ctx, chromedp.Text(chromedp.ID("pass-rate"))); got != fmt.Sprintf("%.1f%%", 100*s.PassRate) {
		t.Errorf("without JavaScript the pass rate shows %q", got)
	}
	if got := run(t, nojs.ctx, chromedp.Text(chromedp.CSS("#rollouts noscript, #rollouts .banner"))); !strings.Contains(got, "need JavaScript") {
		t.Errorf("without JavaScript the page does not say what is missing: %q", got)
	}
	saveArtifact(t, "report-nojs.png", run(t, nojs.ctx, chromedp.CaptureScreenshot()))
	nojs.checkOffline(t)
}

// countPolls is run in each new document of a tab before the page's own
// script: it counts the intervals the page sets (chromedp's Poll sets
// timeouts of its own) and its requests for status.
const countPolls = `(() => {
  window.intervals = 0;
  window.statusFetches = 0;
  const setInterval = window.setInterval;
  window.setInterval = function (...args) { window.intervals++; return setInterval.apply(this, args); };
  const fetch = window.fetch;
  window.fetch = function (url, ...rest) { if (String(url).endsWith('status')) window.statusFetches++; return fetch.call(this, url, ...rest); };
})()`

// TestBrowserLiveReload serves a live page as `proctor view` does: it
// reloads itself when the status says a rollout was added, keeping the
// table's filter and the open trajectory, and once the run has finished it
// reloads a last time and polls no more.
func TestBrowserLiveReload(t *testing.T) {
	browser := newBrowser(t)
	dir := t.TempDir()
	fixture{tasks: 2, attempts: 1, turns: 1}.write(t, dir)
	var rollouts atomic.Int32
	var finished atomic.Bool
	rollouts.Store(2)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { WriteHTML(w, dir, HTMLOptions{Live: true}) })
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(Status{Rollouts: int(rollouts.Load()), Finished: finished.Load()})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tb := newTab(t, browser)
	if _, err := chromedp.Call(tb.ctx, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: countPolls}); err != nil {
		t.Fatal(err)
	}
	do(t, tb.ctx, chromedp.Navigate(srv.URL+"/"), chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1'`))
	if n := run(t, tb.ctx, chromedp.Evaluate[int](`window.intervals`)); n != 1 {
		t.Fatalf("the live page set %d intervals, want 1 to poll its status", n)
	}
	do(t, tb.ctx, setValue("filter", "task-0001", "input"), chromedp.Evaluate[chromedp.Void](`location.hash = '#r-1'`),
		chromedp.Poll[chromedp.Void](`document.getElementById('detail').dataset.rollout === '1'`))

	// reload waits for the page to be loaded anew and checks that it kept
	// the filter and the open trajectory.
	reload := func(rolloutsShown int) {
		t.Helper()
		do(t, tb.ctx, chromedp.Evaluate[chromedp.Void](`window.before = 1`))
		// The reload replaces the page under any running poll, so ask again.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			reloaded, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`window.before === undefined && document.body.dataset.ready === '1'`))
			if err == nil && reloaded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page did not reload after the status changed (last error: %v)", err)
			}
		}
		do(t, tb.ctx, chromedp.Poll[chromedp.Void](`document.getElementById('detail').dataset.rollout !== undefined`))
		if got := run(t, tb.ctx, chromedp.Evaluate[[]string](`[document.getElementById('filter').value, document.getElementById('shown').textContent,
			document.getElementById('n-rollouts').textContent, document.getElementById('detail').dataset.rollout, String(document.getElementById('detail').hidden)]`)); !slices.Equal(got, []string{
			"task-0001", fmt.Sprintf("1 of %d rollouts", rolloutsShown), fmt.Sprint(rolloutsShown), "1", "false"}) {
			t.Errorf("after the reload the page shows [filter, rows, rollouts, open rollout, detail hidden] = %q", got)
		}
	}

	// A rollout finishes.
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Append(rundir.Record{RolloutID: "task-0002#0", TaskID: "task-0002", Outcome: rundir.OutcomeFailed}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	rollouts.Store(3)
	reload(3)

	// The run finishes: one more reload, then no more polling.
	var man map[string]any
	b, err := os.ReadFile(filepath.Join(dir, rundir.ManifestFile))
	if err != nil || json.Unmarshal(b, &man) != nil {
		t.Fatalf("manifest: %v", err)
	}
	man["finished_at"] = time.Now().UTC()
	if err := rundir.WriteJSONAtomic(filepath.Join(dir, rundir.ManifestFile), man); err != nil {
		t.Fatal(err)
	}
	finished.Store(true)
	reload(3)
	if got := run(t, tb.ctx, chromedp.Evaluate[[]int](`[window.intervals, window.statusFetches, document.querySelectorAll('[data-live], #in-progress').length]`)); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("the page of the finished run set %d intervals, asked for its status %d times and has %d marks of a run in progress", got[0], got[1], got[2])
	}
	tb.checkOffline(t, srv.URL+"/")
}

// TestBrowserShowsExactSeeds opens rollouts whose seeds need all 64 bits:
// the page shows them digit for digit, in the record's facts and in a
// transcript shown as written, although JavaScript numbers hold 53 bits.
func TestBrowserShowsExactSeeds(t *testing.T) {
	browser := newBrowser(t)
	dir := t.TempDir()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const seed = 8980721685713115185 // rounds to 8980721685713115000 as a float64
	for i, tr := range []any{
		map[string]any{"seed": uint64(seed), "trajectory": map[string]any{"agent": "llm", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}},
		map[string]any{"seed": uint64(seed + 2), "prompt": "p", "trajectory": map[string]any{"agent": "oracle", "messages": nil}},
	} {
		name := fmt.Sprintf("t%d.json", i)
		if err := store.WriteTranscript(name, tr); err != nil {
			t.Fatal(err)
		}
		if err := store.Append(rundir.Record{RolloutID: fmt.Sprintf("t#%d", i), TaskID: "t", Attempt: i, Outcome: rundir.OutcomePassed,
			Seed: uint64(seed + 2*i), Transcript: "transcripts/" + name}); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	recs, err := rundir.Read(dir) // the seeds as results.jsonl holds them
	if err != nil {
		t.Fatal(err)
	}
	page := fileURL(writeReportFile(t, dir))

	tb := newTab(t, browser)
	do(t, tb.ctx, chromedp.Navigate(page), chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1'`))
	for i, rec := range recs {
		want := strconv.FormatUint(rec.Seed, 10)
		do(t, tb.ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#r-%d'`, i)),
			chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById('detail').dataset.rollout === '%d'`, i)))
		if got := run(t, tb.ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#detail dt')].find(e => e.textContent === 'seed').nextElementSibling.textContent`)); got != want {
			t.Errorf("rollout %d shows seed %s, results.jsonl says %s", i, got, want)
		}
		if i == 1 { // no messages: the transcript is shown as it was written
			if text := run(t, tb.ctx, chromedp.TextContent(chromedp.ID("detail"))); !strings.Contains(text, `"seed": `+want+",") {
				t.Errorf("the transcript of rollout %d does not show its seed %s:\n%s", i, want, text)
			}
		}
	}
	tb.checkOffline(t)
}

// shownSummary is the text the summary part of the page shows, as a reader
// sees it (innerText, not attributes).
type shownSummary struct {
	Headline string            `json:"headline"`
	KV       map[string]string `json:"kv"`     // the table under the headline
	Phases   [][]string        `json:"phases"` // phase, mean, p50, p95, max
	Bars     []struct {
		Title string  `json:"title"`
		Rate  string  `json:"rate"`
		Width float64 `json:"width"`
	} `json:"bars"`
	Grid []struct {
		Cells   []string `json:"cells"` // task, category, ..., passed
		Classes []string `json:"classes"`
	} `json:"grid"`
}

const readSummary = `(() => {
  const text = e => e.innerText.replace(/\s+/g, ' ').trim();
  return {
    headline: text(document.querySelector('.headline')),
    kv: Object.fromEntries([...document.querySelectorAll('table.kv tr')].map(r => [text(r.cells[0]), text(r.cells[1])])),
    phases: [...document.querySelectorAll('#phases tbody tr')].map(r => [...r.cells].map(text)),
    bars: [...document.querySelectorAll('svg.chart g')].map(g => ({
      title: g.querySelector('title').textContent, rate: g.querySelectorAll('text')[1].textContent,
      width: +g.querySelector('rect.bar').getAttribute('width') })),
    grid: [...document.querySelectorAll('table.grid tbody tr')].map(r => ({
      cells: [...r.cells].map(text), classes: [...r.querySelectorAll('td.cell')].map(c => c.className) })),
  };
})()`

// checkShownSummary compares every figure of the summary part of the page,
// as shown, with s, read from summary.json. The formats are written out
// here rather than taken from the code under test.
func checkShownSummary(t *testing.T, ctx context.Context, s Summary) {
	t.Helper()
	pct := func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
	got := run(t, ctx, chromedp.Evaluate[shownSummary](readSummary))

	count := func(n int, word string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, word)
		}
		return fmt.Sprintf("%d %ss", n, word)
	}
	if want := fmt.Sprintf("pass rate %s ± %s over %s of %s (up to %s each)",
		pct(s.PassRate), pct(s.StdErr), count(s.Rollouts, "rollout"), count(s.Tasks, "task"), count(s.Attempts, "attempt")); got.Headline != want {
		t.Errorf("headline shows\n  %q\nsummary.json says\n  %q", got.Headline, want)
	}

	var outcomes, errs []string
	for _, o := range []string{"passed", "failed", "agent_timeout", "infra_error"} {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", o, s.Outcomes[o]))
	}
	for _, k := range slices.Sorted(maps.Keys(s.ErrorClasses)) {
		errs = append(errs, fmt.Sprintf("%s %d", k, s.ErrorClasses[k]))
	}
	want := map[string]string{
		"excluding infra errors": pct(s.PassRateScored),
		"mean reward":            fmt.Sprintf("%.3f", s.MeanReward),
		"tokens":                 fmt.Sprintf("%d in (%d cached), %d out", s.Usage.PromptTokens, s.Usage.CachedTokens, s.Usage.CompletionTokens),
		"cost":                   fmt.Sprintf("$%.4f", s.CostUSD),
	}
	if len(errs) > 0 {
		want["infra error classes"] = strings.Join(errs, " ")
	}
	for k, v := range s.PassAtK {
		want[k] = fmt.Sprintf("%.3f", v)
	}
	for k, v := range want {
		if got.KV[k] != v {
			t.Errorf("%s shows %q, summary.json says %q", k, got.KV[k], v)
		}
	}
	// Outcomes show as "<mark> passed 12"; the marks are checked elsewhere.
	shown := got.KV["outcomes"]
	for _, o := range outcomes {
		if !strings.Contains(shown+" ", " "+o+" ") {
			t.Errorf("outcomes show %q, summary.json says %s", shown, o)
		}
	}
	for k := range got.KV {
		if _, ok := want[k]; !ok && k != "outcomes" {
			t.Errorf("the page shows %s = %q, which summary.json lacks", k, got.KV[k])
		}
	}

	var phases [][]string
	for _, p := range slices.Sorted(maps.Keys(s.Phases)) {
		ph := s.Phases[p]
		phases = append(phases, []string{p, fmt.Sprintf("%.2f", ph.Mean), fmt.Sprintf("%.2f", ph.P50), fmt.Sprintf("%.2f", ph.P95), fmt.Sprintf("%.2f", ph.Max)})
	}
	// The page orders the phases as they happen; compare them as sets.
	sorted := slices.Clone(got.Phases)
	slices.SortFunc(sorted, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	if !slices.EqualFunc(sorted, phases, slices.Equal) {
		t.Errorf("phase table shows\n  %v\nsummary.json says\n  %v", got.Phases, phases)
	}

	cats := slices.Sorted(maps.Keys(s.Categories))
	if len(got.Bars) != len(cats) {
		t.Errorf("chart has %d bars, summary.json %d categories", len(got.Bars), len(cats))
	}
	for i, k := range cats[:min(len(cats), len(got.Bars))] {
		c, bar := s.Categories[k], got.Bars[i]
		if want := fmt.Sprintf("%s: %d/%d passed", k, c.Passed, c.N); bar.Title != want {
			t.Errorf("bar %d is titled %q, summary.json says %q", i, bar.Title, want)
		}
		if want := fmt.Sprintf("%s of %d", pct(c.PassRate), c.N); bar.Rate != want {
			t.Errorf("bar of %s shows %q, summary.json says %q", k, bar.Rate, want)
		}
		if math.Abs(bar.Width-300*c.PassRate) > 0.5 {
			t.Errorf("bar of %s is %v wide, want %.1f of 300 for %s", k, bar.Width, 300*c.PassRate, pct(c.PassRate))
		}
	}

	if len(got.Grid) != len(s.Table) {
		t.Fatalf("grid has %d tasks, summary.json %d", len(got.Grid), len(s.Table))
	}
	for i, row := range s.Table {
		g := got.Grid[i]
		if len(g.Cells) < 3 || g.Cells[0] != row.TaskID || g.Cells[1] != row.Category || g.Cells[len(g.Cells)-1] != fmt.Sprintf("%d/%d", row.Passed, len(row.Outcomes)) {
			t.Errorf("grid row %d shows %q, summary.json says %s %s %d/%d", i, g.Cells, row.TaskID, row.Category, row.Passed, len(row.Outcomes))
		}
		var classes []string
		for _, o := range row.Outcomes {
			classes = append(classes, "cell o-"+o)
		}
		if !slices.Equal(g.Classes, classes) {
			t.Errorf("grid row of %s shows outcomes %v, summary.json says %v", row.TaskID, g.Classes, row.Outcomes)
		}
	}
}

// TestBrowserSortsNaturally sorts the table by a text column whose values
// hold numbers of different lengths (task#10 after task#9) and by a number
// column whose values a comparison of strings would misorder.
func TestBrowserSortsNaturally(t *testing.T) {
	browser := newBrowser(t)
	dir := t.TempDir()
	fixture{tasks: 2, attempts: 12, turns: 1, finished: true}.write(t, dir)
	recs, err := rundir.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	tb := newTab(t, browser)
	do(t, tb.ctx, chromedp.Navigate(fileURL(writeReportFile(t, dir))), chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1'`))
	// column clicks the header of a column and returns the column as shown.
	column := func(header string) []string {
		t.Helper()
		return run(t, tb.ctx, chromedp.Evaluate[[]string](fmt.Sprintf(`(() => {
  const k = [...document.querySelectorAll('#table thead th')].findIndex(th => th.textContent === %q);
  document.querySelectorAll('#table thead th')[k].click();
  return [...document.querySelectorAll('#table tbody tr')].map(tr => tr.cells[k].textContent);
})()`, header)))
	}

	var ids []string
	for _, r := range slices.SortedFunc(slices.Values(recs), func(a, b rundir.Record) int {
		return cmp.Or(strings.Compare(a.TaskID, b.TaskID), a.Attempt-b.Attempt)
	}) {
		ids = append(ids, r.RolloutID)
	}
	if got := column("rollout"); !slices.Equal(got, ids) {
		t.Errorf("sorted up by rollout:\n  %q\nwant\n  %q", got, ids)
	}
	down := slices.Clone(ids)
	slices.Reverse(down)
	if got := column("rollout"); !slices.Equal(got, down) {
		t.Errorf("sorted down by rollout:\n  %q\nwant\n  %q", got, down)
	}

	shown := column("total s")
	secs := make([]float64, len(shown))
	for i, v := range shown {
		if secs[i], err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("total s shows %q", v)
		}
	}
	if !slices.IsSorted(secs) {
		t.Errorf("sorted up by total s: %v", shown)
	}
	if slices.IsSorted(shown) {
		t.Errorf("the seconds %v sort the same as text: the check shows nothing", shown)
	}
	tb.checkOffline(t)
}

// TestBrowserVerifierOutputShowsBothEnds: a long verifier output is shown
// by its first and last lines with the lines between marked as left out
// (a failing test's start was lost when only the tail was kept), and the
// verifier's whole log is a link to its file in the run directory (issue
// 32); a verifier that reached no reward shows as such.
func TestBrowserVerifierOutputShowsBothEnds(t *testing.T) {
	browser := newBrowser(t)
	dir := t.TempDir()
	store, err := rundir.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	out.WriteString("FIRST-LINE setting up\n")
	for i := range 200 {
		fmt.Fprintf(&out, "middle line %d\n", i)
	}
	out.WriteString("LAST-LINE summary")
	name := rundir.VerifierLogName("t#0", 0)
	if err := store.WriteVerifierLog(name, out.String()); err != nil {
		t.Fatal(err)
	}
	if err := store.Append(rundir.Record{RolloutID: "t#0", TaskID: "t", Outcome: rundir.OutcomeVerifierFailed, Error: "test.sh ran past the verifier timeout",
		VerifierOutput: out.String(), VerifierLog: rundir.VerifierLogDir + "/" + name}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	page := fileURL(writeReportFile(t, dir))

	tb := newTab(t, browser)
	do(t, tb.ctx, chromedp.Navigate(page), chromedp.Poll[chromedp.Void](`document.body.dataset.ready === '1'`),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#r-0'`),
		chromedp.Poll[chromedp.Void](`document.getElementById('detail').dataset.rollout === '0'`))
	preview := run(t, tb.ctx, chromedp.Evaluate[string](`document.querySelector('#detail details.clip summary').innerText`))
	if !strings.Contains(preview, "FIRST-LINE") || !strings.Contains(preview, "LAST-LINE") || !strings.Contains(preview, "lines left out") {
		t.Errorf("the collapsed verifier output shows:\n%s", preview)
	}
	href := run(t, tb.ctx, chromedp.Evaluate[string](`document.querySelector('#detail a[href^="verifier/"]').href`))
	u, err := url.Parse(href)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(u.Path); err != nil || string(b) != out.String() {
		t.Errorf("the link %s is not the verifier's log: %v", href, err)
	}
	if got := run(t, tb.ctx, chromedp.Evaluate[string](`document.querySelector('#detail dd').textContent`)); !strings.Contains(got, "verifier_failed") {
		t.Errorf("outcome shown as %q", got)
	}
	tb.checkOffline(t)
}
