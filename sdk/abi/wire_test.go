package abi

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/wire")

// messages are every JSON message of the contract.
var messages = []any{
	Empty{}, Error{}, Manifest{}, ConfigRequest{}, TasksRequest{}, Task{}, TasksResponse{}, Skipped{}, RolloutRequest{},
	PromptResponse{}, SandboxSpec{}, VerifyRequest{}, TestResult{}, VerifyResponse{}, OracleResponse{},
	RewardRequest{}, RewardResponse{}, ChatMessage{}, ModelRequest{}, ModelResponse{}, ExecRequest{},
	ExecResponse{}, ReadFileRequest{}, ReadFileResponse{}, WriteFileRequest{}, UploadRequest{},
	DownloadRequest{}, DownloadResponse{}, DatasetRequest{}, DatasetResponse{}, RowError{}, RepoCheckoutRequest{},
	RepoCheckoutResponse{}, HostInfo{},
}

// TestWireFormat pins the JSON of every message: each is filled, every
// field set, and its encoding compared with testdata/wire/TYPE.json. A
// renamed JSON name, a field added, dropped or retyped fails here: that is
// a change of the contract, to make on purpose (go test -update) and to
// note under Versions in abi.go. The golden file must also decode back to
// the same value, so both directions of the wire are pinned.
func TestWireFormat(t *testing.T) {
	for _, m := range messages {
		typ := reflect.TypeOf(m)
		t.Run(typ.Name(), func(t *testing.T) {
			v := reflect.New(typ)
			fill(v.Elem(), 1)
			got, err := json.MarshalIndent(v.Interface(), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden(t, typ.Name()+".json", got)
			back := reflect.New(typ)
			dec := json.NewDecoder(bytes.NewReader(got))
			dec.DisallowUnknownFields()
			if err := dec.Decode(back.Interface()); err != nil {
				t.Fatalf("the golden JSON does not decode: %v", err)
			}
			// Raw JSON fields keep the golden file's indentation: compare
			// compact encodings.
			again, _ := json.Marshal(back.Interface())
			var want bytes.Buffer
			json.Compact(&want, got)
			if !bytes.Equal(again, want.Bytes()) {
				t.Errorf("the golden JSON does not decode back to the value:\n%s\n%s", again, want.Bytes())
			}
		})
	}
}

// TestNames pins the link names, status codes, hooks, operations and
// classes.
func TestNames(t *testing.T) {
	names := map[string]any{
		"version": Version, "minor": Minor,
		"links":    []string{MarkerExport, HandleExport, ImportModule, ImportReadInput, ImportSetOutput, ImportCall, ImportTakeResponse, ImportLog},
		"sections": []string{FilesSection, MemorySection},
		"status":   []int{StatusOK, StatusError, StatusUnknown, StatusDenied, StatusDeadline, StatusTooLarge, StatusBadRequest},
		"hooks":    Hooks(), "ops": Ops(), "classes": Classes(), "max_read_file": MaxReadFile,
		"bounds": map[string]int{"exec_output": MaxExecOutput, "exec_response": MaxExecResponse, "prompt": MaxPrompt,
			"tasks": MaxTasks, "task_field": MaxTaskField, "tags": MaxTags, "scores": MaxScores, "score_name": MaxScoreName,
			"tests": MaxTests, "test_name": MaxTestName, "test_names": MaxTestNames, "test_message": MaxTestMessage,
			"test_messages": MaxTestMessages, "error_text": MaxErrorText, "row": MaxRow, "log": MaxLog},
	}
	got, _ := json.MarshalIndent(names, "", "  ")
	golden(t, "names.json", append(got, '\n'))
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "wire", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (a new message? run go test -update and check the file in)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the wire format of %s changed: that breaks plugins or hosts built before it.\nIf it is meant (a new optional field, a new minor version), run go test -update, check the diff in and note it under Versions in abi.go.\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// fill sets every field of v to a value that is not its zero value, n
// making values differ.
func fill(v reflect.Value, n int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n+i)
			}
		}
	case reflect.String:
		v.SetString(strings.ToLower(v.Type().Name()) + fmt.Sprint(n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(n))
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Float64:
		v.SetFloat(float64(n) + 0.5)
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(fmt.Sprintf(`{"raw":%d}`, n)))
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(fmt.Sprintf("bytes%d", n)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	default:
		panic("fill: no value for " + v.Type().String())
	}
}

// TestEveryMessagePinned: a struct type added to the contract is a message
// and must be in messages, so that its wire format is pinned too.
func TestEveryMessagePinned(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "abi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, m := range messages {
		pinned[reflect.TypeOf(m).Name()] = true
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, s := range g.Specs {
			ts := s.(*ast.TypeSpec)
			if _, isStruct := ts.Type.(*ast.StructType); isStruct && ts.Name.IsExported() && !pinned[ts.Name.Name] {
				t.Errorf("message %s is not in messages: add it there and run go test -update", ts.Name.Name)
			}
		}
	}
}
