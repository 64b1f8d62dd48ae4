//go:build !wasip1

package sdktest_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

// TestEachRowSaysWhichRowsAreBroken: a row the host could not read comes
// with a *RowError naming it, and the rows after it still come;
// ReadAllRows keeps its place as null.
func TestEachRowSaysWhichRowsAreBroken(t *testing.T) {
	h := sdktest.New(t)
	h.Datasets["d"] = []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`{"a":2}`), json.RawMessage(`{"a":3}`)}
	h.BadRows = map[string]map[int]string{"d": {1: "dataset d: line 2 is not a JSON object"}}
	var got []string
	err := sdk.EachRow("d", "", func(i int, row json.RawMessage, err error) error {
		var re *sdk.RowError
		switch {
		case errors.As(err, &re):
			got = append(got, re.Reason)
		case err != nil:
			t.Fatalf("row %d: %v", i, err)
		default:
			got = append(got, string(row))
		}
		return nil
	})
	if err != nil || len(got) != 3 || got[0] != `{"a":1}` || got[1] != "dataset d: line 2 is not a JSON object" || got[2] != `{"a":3}` {
		t.Fatalf("%v %q", err, got)
	}
	rows, err := sdk.ReadAllRows("d", "")
	if err != nil || len(rows) != 3 || string(rows[1]) != "null" {
		t.Fatalf("%v %q", err, rows)
	}
}

// TestSkipsStayBounded: past MaxSkipped, skipped tasks are counted in one
// last entry.
func TestSkipsStayBounded(t *testing.T) {
	var s sdk.Skips
	for i := range sdk.MaxSkipped + 5 {
		s.Add(string(rune('a'+i%26)), "no task_name")
	}
	l := s.List()
	if len(l) != sdk.MaxSkipped+1 || l[sdk.MaxSkipped].Reason != "5 more tasks were skipped; the first 1000 are listed" {
		t.Fatalf("%d entries, last %+v", len(l), l[len(l)-1])
	}
}
