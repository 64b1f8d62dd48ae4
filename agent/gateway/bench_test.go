package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/agent/openai"
)

// BenchmarkGatewayOverhead: a model call through the gateway against the
// same call made directly, on a local chat endpoint that answers at once
// (a canned answer): the difference is what the gateway adds to a call
// beyond the endpoint's own time. Each format sends its recorded request
// (testdata/API/request.json, as the real CLI sent it), streaming, over
// HTTP on the loopback as a CLI does through the relay; "direct" sends
// the chat request the gateway makes of it with the same client the
// gateway uses. The metric is the median per call.
func BenchmarkGatewayOverhead(b *testing.B) {
	answer, _ := chatCodec{}.encode(nil, fixedReply, "scripted")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}))
	defer up.Close()
	f := openai.NewFactory(openai.Config{BaseURL: up.URL + "/v1", Model: "scripted", APIKey: "k"}, openai.NewLimiter(4))
	for _, api := range []string{openai.APIAnthropic, openai.APIResponses, openai.APIGemini, openai.APIChat} {
		req, err := os.ReadFile(filepath.Join("testdata", api, "request.json"))
		if err != nil {
			b.Fatal(err)
		}
		path, _ := os.ReadFile(filepath.Join("testdata", api, "path"))
		hr := httptest.NewRequest(http.MethodPost, strings.TrimSpace(string(path)), nil)
		c := route(hr)
		parsed, err := c.parse(req, hr)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(api+"/direct", func(b *testing.B) {
			cl := f.New()
			median(b, func() {
				if _, err := cl.Complete(context.Background(), parsed.messages, parsed.tools); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(api+"/gateway", func(b *testing.B) {
			g := New(Config{API: openai.APIChat, Endpoint: f.New(), Model: "scripted", Token: token})
			srv := httptest.NewServer(g)
			defer srv.Close()
			url := srv.URL + strings.TrimSpace(string(path))
			median(b, func() {
				r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(req))
				r.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			})
		})
	}
}

// median runs op once per iteration and reports the median in ms.
func median(b *testing.B, op func()) {
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		op()
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/1e6, "ms/call")
}
