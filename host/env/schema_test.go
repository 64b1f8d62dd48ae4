package env

import (
	"bytes"
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/sdk/abi"
)

var update = flag.Bool("update", false, "rewrite docs/reward-request.schema.json")

const (
	schemaFile  = "../../docs/reward-request.schema.json"
	exampleFile = "../../docs/reward-request.example.json"
)

// TestRewardRequestSchema keeps docs/reward-request.schema.json, the JSON
// Schema of what a reward plugin gets, generated from the Go types the
// host sends (abi.RewardRequest, with the transcript as trajectory.Transcript)
// and their doc comments. A field added, renamed or documented anew fails
// here until the file is regenerated with go test -update.
func TestRewardRequestSchema(t *testing.T) {
	g := &schemaGen{docs: map[string]string{}, defs: map[string]any{}}
	g.readDocs(t, "../../sdk/abi/abi.go", "abi.")
	g.readDocs(t, "../../trajectory/trajectory.go", "trajectory.")
	root := g.schema(reflect.TypeOf(abi.RewardRequest{}))
	schema := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://github.com/proctor-dev/proctor/docs/reward-request.schema.json",
		"title":       "RewardRequest",
		"description": "The input of a reward plugin's reward.score hook (ABI v1." + strings.TrimSpace(jsonString(abi.Minor)) + "), generated from proctor's Go types. Readers must ignore fields they do not know: later minor versions add fields.",
		"$ref":        root["$ref"],
		"$defs":       g.defs,
	}
	got, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the Go types say (err %v): regenerate it with go test ./host/env -run TestRewardRequestSchema -update, and check the diff in", schemaFile, err)
	}
}

// TestRewardRequestExample: the documented example is a request as the
// host sends it, every key one the Go types have.
func TestRewardRequestExample(t *testing.T) {
	b, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var req abi.RewardRequest
	strict(t, b, &req)
	var tr agent.Transcript
	strict(t, req.Trajectory, &tr)
	if req.Task.ID == "" || tr.Trajectory == nil || len(tr.Trajectory.Messages) == 0 || len(tr.Trajectory.Turns) == 0 || len(req.Verify.Tests) == 0 {
		t.Errorf("the example should show every part: %+v", req)
	}
}

func strict(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %T: %v", exampleFile, v, err)
	}
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

// schemaGen writes JSON Schema definitions of Go types.
type schemaGen struct {
	docs map[string]string // "abi.Task" and "abi.Task.ID" → doc comment
	defs map[string]any
}

// readDocs reads the doc comments of a file's struct types and fields.
func (g *schemaGen) readDocs(t *testing.T, path, prefix string) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, s := range gd.Specs {
			ts := s.(*ast.TypeSpec)
			doc := ts.Doc
			if doc == nil {
				doc = gd.Doc
			}
			g.docs[prefix+ts.Name.Name] = text(doc)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, f := range st.Fields.List {
				d := text(f.Doc)
				if d == "" {
					d = text(f.Comment)
				}
				for _, n := range f.Names {
					g.docs[prefix+ts.Name.Name+"."+n.Name] = d
				}
			}
		}
	}
}

func text(c *ast.CommentGroup) string {
	if c == nil {
		return ""
	}
	return strings.Join(strings.Fields(c.Text()), " ")
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

// schema is the schema of t: a $ref for named structs, defined once.
func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == rawMessage:
		return map[string]any{}
	case t.Kind() == reflect.Pointer:
		return g.schema(t.Elem())
	case t.Kind() == reflect.Struct:
		name := t.Name()
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = nil // placeholder against cycles
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/$defs/" + name}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() == reflect.Float64 || t.Kind() == reflect.Float32:
		return map[string]any{"type": "number"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return map[string]any{"type": "integer"}
	}
	panic("schema: no JSON for " + t.String())
}

// prefix is the package of a type, as readDocs names it.
func prefix(t reflect.Type) string { return t.PkgPath()[strings.LastIndex(t.PkgPath(), "/")+1:] + "." }

// object is the schema of a struct: its fields, embedded ones inlined.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			if !f.IsExported() || name == "-" {
				continue
			}
			p := g.schema(f.Type)
			if t == reflect.TypeOf(abi.RewardRequest{}) && f.Name == "Trajectory" {
				p = g.schema(reflect.TypeOf(agent.Transcript{}))
			}
			if d := g.docs[prefix(t)+t.Name()+"."+f.Name]; d != "" {
				p = with(p, "description", d)
			}
			props[name] = p
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
	}
	walk(t)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	if d := g.docs[prefix(t)+t.Name()]; d != "" {
		s["description"] = d
	}
	return s
}

// with is s with one more key; a $ref gets it beside the reference.
func with(s map[string]any, k string, v any) map[string]any {
	out := map[string]any{k: v}
	for kk, vv := range s {
		out[kk] = vv
	}
	return out
}
