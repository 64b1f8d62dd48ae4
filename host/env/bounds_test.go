package env

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
)

// TestExecAnswerFits: output that escapes to more than the answer may hold
// (zeros, bytes that are not UTF-8) keeps its head and tail within
// abi.MaxExecResponse; output that fits is left alone.
func TestExecAnswerFits(t *testing.T) {
	zeros := "HEAD" + strings.Repeat("\x00", abi.MaxExecOutput) + "TAIL"
	bad := strings.Repeat("\xff", abi.MaxExecOutput)
	out, errs, cut := fitExec(zeros, bad)
	b, _ := json.Marshal(abi.ExecResponse{Stdout: out, Stderr: errs, Truncated: cut})
	if !cut || len(b) > abi.MaxExecResponse || !strings.HasPrefix(out, "HEAD") || !strings.HasSuffix(out, "TAIL") || !strings.Contains(out, "bytes cut to fit") {
		t.Errorf("cut %v, answer %d bytes, over %d, stdout %.20q...%q", cut, len(b), abi.MaxExecResponse, out, out[max(0, len(out)-20):])
	}
	base64ish := strings.Repeat("QUJD", 21<<20/4) // SWE-smith's test log, 16 MiB as base64
	if out, _, cut := fitExec(base64ish, "warning"); cut || out != base64ish {
		t.Errorf("output that fits was cut")
	}
}

// FuzzJSONCost: jsonCost is what encoding/json writes, so fitExec's bound
// holds for any output.
func FuzzJSONCost(f *testing.F) {
	for _, s := range []string{"", "a\x00b", "<&>", "\xff\xfe", "é\u2028\u2029", "\b\f\n\r\t\"\\", "\xed\xa0\x80"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, budget int) {
		b, _ := json.Marshal(s)
		if got := jsonCost(s); got != len(b)-2 {
			t.Fatalf("jsonCost(%q) = %d, encoding/json writes %d", s, got, len(b)-2)
		}
		budget = max(budget%(4*len(s)+1), 0) + 256
		cut := fitJSON(s, jsonCost(s), budget)
		if b, _ := json.Marshal(cut); len(b)-2 > budget {
			t.Fatalf("fitJSON(%q, %d) = %q, %d bytes of JSON", s, budget, cut, len(b)-2)
		}
	})
}

// TestVerdictBounds: a verdict with more named scores or tests than a
// record keeps is refused naming the bound; messages are cut to their
// budget.
func TestVerdictBounds(t *testing.T) {
	scores := map[string]float64{}
	for i := range abi.MaxScores + 1 {
		scores[fmt.Sprint("s", i)] = 1
	}
	if err := checkReward(1, scores); err == nil || !strings.Contains(err.Error(), "257 named scores, over the 256 a verdict may hold (abi.MaxScores)") {
		t.Errorf("too many scores: %v", err)
	}
	if err := checkReward(1, map[string]float64{strings.Repeat("n", abi.MaxScoreName+1): 1}); err == nil || !strings.Contains(err.Error(), "(abi.MaxScoreName)") {
		t.Errorf("a long score name: %v", err)
	}
	if err := checkTests(make([]abi.TestResult, abi.MaxTests+1)); err == nil || !strings.Contains(err.Error(), "(abi.MaxTests)") {
		t.Errorf("too many tests: %v", err)
	}
	if err := checkTests([]abi.TestResult{{Name: strings.Repeat("n", abi.MaxTestName+1)}}); err == nil || !strings.Contains(err.Error(), "(abi.MaxTestName)") {
		t.Errorf("a long test name: %v", err)
	}
	many := make([]abi.TestResult, abi.MaxTestNames/abi.MaxTestName+1)
	for i := range many {
		many[i].Name = strings.Repeat("n", abi.MaxTestName)
	}
	if err := checkTests(many); err == nil || !strings.Contains(err.Error(), "(abi.MaxTestNames)") {
		t.Errorf("names over their total: %v", err)
	}
	tests := make([]abi.TestResult, 200)
	for i := range tests {
		tests[i] = abi.TestResult{Name: fmt.Sprint("t", i), Message: strings.Repeat("m", abi.MaxTestMessage)}
	}
	if err := checkTests(tests); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, tr := range tests {
		total += len(tr.Message)
	}
	if total > abi.MaxTestMessages+200*64 || len(tests[0].Message) != abi.MaxTestMessage || !strings.Contains(tests[199].Message, "bytes cut]") {
		t.Errorf("messages: %d bytes together, first %d, last %q", total, len(tests[0].Message), tests[199].Message)
	}
}

// TestPromptBound: a prompt over abi.MaxPrompt is refused, naming which.
func TestPromptBound(t *testing.T) {
	if err := checkPrompt("", strings.Repeat("p", abi.MaxPrompt)); err != nil {
		t.Errorf("a prompt at the bound: %v", err)
	}
	if err := checkPrompt("", strings.Repeat("p", 50<<20)); err == nil || err.Error() != "the user prompt is 50 MiB, over the 1 MiB a prompt may be (abi.MaxPrompt)" {
		t.Errorf("a 50 MiB prompt: %v", err)
	}
}

// TestTaskListBounds: more tasks than a run takes fail tasks.load; a task
// over a field's bound is skipped alone; skipped tasks past the ones a run
// lists are counted in one entry.
func TestTaskListBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tasks":[`)
	for i := range abi.MaxTasks + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%d"}`, i)
	}
	b.WriteString(`]}`)
	if _, err := decodeTasks([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "over 100000 tasks, the most a run takes (abi.MaxTasks)") {
		t.Errorf("too many tasks: %v", err)
	}
	long := strings.Repeat("x", abi.MaxTaskField+1)
	var skipped []string
	for i := range maxSkippedKept + 5 {
		skipped = append(skipped, fmt.Sprintf(`{"id":"s%d","reason":"r"}`, i))
	}
	a, err := decodeTasks([]byte(`{"tasks":[{"id":"ok"},{"id":"` + long + `"},{"id":"t","tags":["` + long + `"]}],"skipped":[` + strings.Join(skipped, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Tasks) != 3 || taskOverBounds(a.Tasks[0]) != "" || !strings.Contains(taskOverBounds(a.Tasks[1]), "the task's id is 513 bytes") ||
		!strings.Contains(taskOverBounds(a.Tasks[2]), "a tag of the task") {
		t.Errorf("tasks %d: %q %q", len(a.Tasks), taskOverBounds(a.Tasks[1]), taskOverBounds(a.Tasks[2]))
	}
	s := a.skipped()
	if len(s) != maxSkippedKept+1 || s[maxSkippedKept].Reason != "5 more tasks were skipped; a run lists the first 1000" {
		t.Errorf("skipped %d, last %+v", len(s), s[len(s)-1])
	}
}

// FuzzDecodeTasks: any answer decodes or fails cleanly, within the
// bounds.
func FuzzDecodeTasks(f *testing.F) {
	f.Add([]byte(`{"tasks":[{"id":"a","tags":["x"]}],"skipped":[{"id":"b","reason":"r"}]}`))
	f.Add([]byte(`{"tasks":null,"skipped":[1]}`))
	f.Add([]byte(`{"tasks":{"id":"a"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeTasks(b)
		if err != nil {
			return
		}
		if len(a.Tasks) > abi.MaxTasks || len(a.skipped()) > maxSkippedKept+1 {
			t.Fatalf("%d tasks, %d skipped", len(a.Tasks), len(a.skipped()))
		}
	})
}

// TestCutCountsWhatItCuts: a text cut where its bound falls inside a rune
// is cut before the rune, and the mark counts every byte cut, the rune's
// too (it used to count only those past the bound).
func TestCutCountsWhatItCuts(t *testing.T) {
	m := strings.Repeat("a", abi.MaxTestMessage-1) + "é" + "b" // é's second byte is at the bound
	tests := []abi.TestResult{{Name: "t", Status: "failed", Message: m}}
	if err := checkTests(tests); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("a", abi.MaxTestMessage-1) + "... [proctor: 3 bytes cut]"
	if got := tests[0].Message; got != want {
		t.Errorf("cut message ends %q, want %q", got[len(got)-40:], want[len(want)-40:])
	}
}
