package report

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
)

// The page is one template plus a style sheet and a script, inlined.
//
//go:embed html/report.tmpl html/report.css html/report.js
var assets embed.FS

var (
	pageCSS = mustRead("html/report.css")
	pageJS  = mustRead("html/report.js")
	page    = template.Must(template.New("report.tmpl").Funcs(template.FuncMap{
		"pct":   percent,
		"num":   func(f float64) string { return fmt.Sprintf("%.3f", f) },
		"secs":  func(f float64) string { return fmt.Sprintf("%.2f", f) },
		"usd":   func(f float64) string { return fmt.Sprintf("$%.4f", f) },
		"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
		"mark":  func(o string) string { return cmp.Or(symbol[o], "?") },
		"class": outcomeClass,
		"words": words,
		"noun":  Noun,
	}).ParseFS(assets, "html/report.tmpl"))
)

func mustRead(name string) string {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// HTMLOptions changes what WriteHTML writes.
type HTMLOptions struct {
	// Live is for a page served by `proctor view`: while the run is not
	// finished (no finished_at in its manifest), the page asks ./status
	// every few seconds and reloads itself when rollouts were added.
	Live bool
}

// Status is how far a run directory has got.
type Status struct {
	Rollouts int  `json:"rollouts"`
	Finished bool `json:"finished"`
}

// ReadStatus reads the status of the run directory dir.
func ReadStatus(dir string) (Status, error) {
	recs, err := readRecords(dir)
	if err != nil {
		return Status{}, err
	}
	m, _, _ := rundir.ReadManifest(dir)
	return Status{Rollouts: len(recs), Finished: m.FinishedAt != nil}, nil
}

func readRecords(dir string) ([]rundir.Record, error) {
	recs, err := rundir.Read(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: give the directory a run wrote (runs/<name>)", dir, rundir.ResultsFile)
	}
	return recs, err
}

// Data of the template.
type (
	pageData struct {
		Title, Dir  string
		CSP         string
		CSS         template.CSS
		JS          template.JS
		Rows        template.JS // JSON without '<', so it cannot end its <script>
		Marks       string      // JSON of symbol, for the script
		PhaseOrder  string      // JSON of phaseOrder, for the script
		Live        bool
		Man         rundir.Manifest
		ManText     string
		Config      string
		Finished    bool
		S           Summary
		Outcomes    []count
		Errors      []count
		PassAtK     []count
		Phases      []phase
		Categories  []bar
		ChartHeight int
		Attempts    []int
		Grid        []gridRow
	}
	count struct {
		Name  string
		N     int
		Value float64
	}
	phase struct {
		Name string
		PhaseTiming
	}
	bar struct {
		Rate
		Name     string
		Label    string // Name, shortened to fit
		Y, Width int
	}
	gridRow struct {
		Task, Category string
		Passed, N      int
		Cells          []gridCell
	}
	gridCell struct {
		Index   int // into results.jsonl, -1 for a rollout not recorded yet
		Outcome string
		ID      string
	}
)

// row is one rollout in the JSON the page's table is built from.
type row struct {
	I          int                `json:"i"`
	ID         string             `json:"id"`
	Category   string             `json:"cat,omitempty"`
	Outcome    string             `json:"o"`
	ErrorClass string             `json:"ec,omitempty"`
	Reward     float64            `json:"r"`
	Turns      int                `json:"turns"`
	TokensIn   int64              `json:"tin"`
	TokensOut  int64              `json:"tout"`
	Cost       float64            `json:"cost"`
	Phases     map[string]float64 `json:"ph,omitempty"`
	Seconds    float64            `json:"dur"`
	Stop       string             `json:"stop,omitempty"`
	Tests      [2]int             `json:"tests"` // passed, total
}

// phaseOrder is the order phases happen in (scheduler.Runner records them); the
// reports list other phases after these.
var phaseOrder = []string{"plugin_start", "sandbox_start", "setup", "agent", "verify", "reward", "teardown", "sandbox_stop"}

// WriteHTML writes the report of the run directory dir as one
// self-contained HTML page: nothing is fetched from anywhere (a
// Content-Security-Policy forbids it), the summary is plain HTML, and a
// script adds a sortable, filterable table of rollouts and a trajectory
// view. Each rollout's record and transcript is embedded gzipped as an
// inert block that the script decodes only when the rollout is opened, so
// a page of thousands of rollouts opens fast. The numbers are computed
// from results.jsonl with Summarize, so a run still in progress (without
// finished_at in its manifest) is reported as far as it got.
func WriteHTML(w io.Writer, dir string, opt HTMLOptions) error {
	recs, err := readRecords(dir)
	if err != nil {
		return err
	}
	man, manText, _ := rundir.ReadManifest(dir) // a missing or broken manifest shows as such
	config, _ := os.ReadFile(filepath.Join(dir, rundir.ConfigFile))
	live := opt.Live && man.FinishedAt == nil

	d := pageData{
		Title: cmp.Or(man.Name, filepath.Base(dir)), Dir: dir,
		CSS: template.CSS(pageCSS), JS: template.JS(pageJS),
		Live: live, Man: man, ManText: string(manText), Config: string(config),
		Finished: man.FinishedAt != nil,
		S:        SummarizeIn(dir, recs),
	}
	// Only the inline style and script of this page may run or load; a
	// served page in progress may also ask for its status.
	connect := "'none'"
	if live {
		connect = "'self'"
	}
	d.CSP = fmt.Sprintf("default-src 'none'; style-src '%s'; script-src '%s'; img-src data:; connect-src %s; base-uri 'none'; form-action 'none'",
		hash(pageCSS), hash(pageJS), connect)

	for _, o := range outcomes {
		d.Outcomes = append(d.Outcomes, count{Name: o, N: d.S.Outcomes[o]})
	}
	marks, _ := json.Marshal(symbol)
	order, _ := json.Marshal(phaseOrder)
	d.Marks, d.PhaseOrder = string(marks), string(order)
	for _, k := range slices.Sorted(maps.Keys(d.S.ErrorClasses)) {
		d.Errors = append(d.Errors, count{Name: k, N: d.S.ErrorClasses[k]})
	}
	for k := 1; k <= len(d.S.PassAtK); k++ {
		name := fmt.Sprintf("pass@%d", k)
		d.PassAtK = append(d.PassAtK, count{Name: name, Value: d.S.PassAtK[name]})
	}
	for _, p := range orderedPhases(d.S.Phases) {
		d.Phases = append(d.Phases, phase{p, d.S.Phases[p]})
	}
	for i, k := range slices.Sorted(maps.Keys(d.S.Categories)) {
		c := d.S.Categories[k]
		d.Categories = append(d.Categories, bar{Rate: c, Name: k, Label: shorten(k, 30), Y: 24 * i, Width: int(300*c.PassRate + 0.5)})
	}
	d.ChartHeight = 24 * len(d.Categories)
	d.Attempts, d.Grid = grid(recs)

	rows := make([]row, len(recs))
	for i, r := range recs {
		rows[i] = row{I: i, ID: r.RolloutID, Category: r.Category,
			Outcome: r.Outcome, ErrorClass: r.ErrorClass, Reward: r.Reward, Turns: r.Turns,
			TokensIn: r.Usage.PromptTokens, TokensOut: r.Usage.CompletionTokens, Cost: r.CostUSD,
			Phases: r.Phases, Seconds: r.Duration().Seconds(), Stop: r.StopReason}
		for _, t := range r.Tests {
			if t.Status == "passed" {
				rows[i].Tests[0]++
			}
			rows[i].Tests[1]++
		}
	}
	js, err := json.Marshal(rows) // escapes <, > and & as \u003c...
	if err != nil {
		return err
	}
	d.Rows = template.JS(js)

	bw := bufio.NewWriterSize(w, 1<<16)
	if err := page.ExecuteTemplate(bw, "top", d); err != nil {
		return err
	}
	if err := writeDetails(bw, dir, recs); err != nil {
		return err
	}
	if err := page.ExecuteTemplate(bw, "bottom", d); err != nil {
		return err
	}
	return bw.Flush()
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256-" + base64.StdEncoding.EncodeToString(h[:])
}

func orderedPhases(m map[string]PhaseTiming) []string {
	var out []string
	for _, p := range phaseOrder {
		if _, ok := m[p]; ok {
			out = append(out, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(phaseOrder, p) {
			out = append(out, p)
		}
	}
	return out
}

// grid is the task x attempt table, with each cell pointing at its record.
func grid(recs []rundir.Record) ([]int, []gridRow) {
	byTask := map[string]map[int]int{}
	maxAttempt := -1
	for i, r := range recs {
		if byTask[r.TaskID] == nil {
			byTask[r.TaskID] = map[int]int{}
		}
		byTask[r.TaskID][r.Attempt] = i
		maxAttempt = max(maxAttempt, r.Attempt)
	}
	var rows []gridRow
	for _, task := range slices.Sorted(maps.Keys(byTask)) {
		g := gridRow{Task: task}
		for a := 0; a <= maxAttempt; a++ {
			i, ok := byTask[task][a]
			if !ok {
				g.Cells = append(g.Cells, gridCell{Index: -1})
				continue
			}
			r := recs[i]
			g.Category = cmp.Or(g.Category, r.Category)
			g.N++
			if r.Outcome == rundir.OutcomePassed {
				g.Passed++
			}
			g.Cells = append(g.Cells, gridCell{Index: i, Outcome: r.Outcome, ID: r.RolloutID})
		}
		rows = append(rows, g)
	}
	var attempts []int
	for a := 0; a <= maxAttempt; a++ {
		attempts = append(attempts, a)
	}
	return attempts, rows
}

// writeDetails writes one inert block per rollout: a line of JSON with its
// record (with its seed once more in decimal, and why its transcript is
// missing), then the transcript file as it is, gzipped and base64-encoded.
// Base64 has no '<', so nothing a model wrote can end the block early; the
// page parses the transcript and says so when it is not JSON.
func writeDetails(w io.Writer, dir string, recs []rundir.Record) error {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	for i, r := range recs {
		fmt.Fprintf(w, "<script type=\"text/x-gzip-base64\" id=\"t-%d\">", i)
		b64 := base64.NewEncoder(base64.StdEncoding, w)
		zw.Reset(b64)
		// The seed also goes as a string: a JavaScript number keeps only
		// 53 of its 64 bits.
		head := struct {
			Record          rundir.Record `json:"record"`
			Seed            string        `json:"seed"`
			TranscriptError string        `json:"transcript_error,omitempty"`
		}{Record: r, Seed: strconv.FormatUint(r.Seed, 10)}
		var tr *os.File
		var size int64
		if r.Transcript != "" {
			var err error
			if tr, size, err = rundir.OpenTranscript(dir, r.Transcript); err != nil {
				head.TranscriptError = err.Error()
			}
		}
		line, err := json.Marshal(head) // one line: Marshal writes no raw newline
		if err != nil {
			return err
		}
		zw.Write(line)
		zw.Write([]byte{'\n'})
		if tr != nil {
			// Streamed, and no more than its size when opened.
			_, err := io.CopyN(zw, tr, size)
			tr.Close()
			if err != nil && err != io.EOF {
				return fmt.Errorf("transcript %s: %w", r.Transcript, err)
			}
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if err := b64.Close(); err != nil {
			return err
		}
		if _, err := io.WriteString(w, "</script>\n"); err != nil {
			return err
		}
	}
	return nil
}

func outcomeClass(o string) string {
	switch o {
	case rundir.OutcomePassed, rundir.OutcomeFailed, rundir.OutcomeAgentTimeout, rundir.OutcomeVerifierFailed, rundir.OutcomeInfraError:
		return "o-" + o
	}
	return "o-other"
}
