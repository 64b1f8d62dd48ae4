package docker

import (
	"strings"
	"testing"
)

func TestReadStream(t *testing.T) {
	in := `{"stream":"Step 1/2 : FROM x\n"}
{"status":"Downloading","id":"abc","progress":"[==>  ]"}
not json at all
{"stream":"Step 2/2 : RUN false\n"}
{"error":"The command '/bin/sh -c false' returned a non-zero code: 1"}
{"stream":"never read\n"}
`
	var progress []string
	tail, err := readStream(strings.NewReader(in), func(s string) { progress = append(progress, s) })
	if err == nil || !strings.Contains(err.Error(), "non-zero code: 1") {
		t.Fatalf("err = %v, want the build error", err)
	}
	for _, want := range []string{"Step 2/2 : RUN false", "not json at all", "non-zero code"} {
		if !strings.Contains(tail, want) {
			t.Errorf("tail lacks %q:\n%s", want, tail)
		}
	}
	if strings.Contains(tail, "never read") {
		t.Errorf("read past the error:\n%s", tail)
	}
	if len(progress) != 1 || progress[0] != "abc Downloading [==>  ]" {
		t.Errorf("progress = %q", progress)
	}
}

func FuzzReadStream(f *testing.F) {
	f.Add(`{"stream":"a\nb\n"}` + "\n" + `{"error":"x"}`)
	f.Add(strings.Repeat(`{"stream":"line\n"}`+"\n", 100))
	f.Fuzz(func(t *testing.T, in string) {
		tail, _ := readStream(strings.NewReader(in), func(string) {})
		// The tail keeps at most 40 lines.
		if n := strings.Count(tail, "\n"); n >= 40 {
			t.Fatalf("tail has %d lines", n+1)
		}
	})
}
