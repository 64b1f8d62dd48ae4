package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/mux"
)

// serveRelay serves answer on a relay of sb and returns the port it has
// in the sandbox.
func serveRelay(t testing.TB, sb *Sandbox, answer string) (net.Listener, string) {
	t.Helper()
	l, err := sb.Relay(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, answer)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestRelay: the agent's processes in an isolated sandbox without a
// network reach an HTTP server of the host through the relay; the
// listener ends with the sandbox; a sandbox without isolation has none.
func TestRelay(t *testing.T) {
	be := newBackend(t)
	sb := start(t, be, sandbox.Spec{})
	l, port := serveRelay(t, sb, "relayed")
	ctx := context.Background()
	r, err := sb.Agent().Exec(ctx, `exec 3<>/dev/tcp/127.0.0.1/`+port+`; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3; echo; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`, sandbox.ExecOptions{Timeout: time.Minute})
	if err != nil || !strings.Contains(r.Stdout, "\r\n\r\nrelayed") || !strings.HasSuffix(strings.TrimSpace(r.Stdout), "relayed\nlo") {
		t.Fatalf("through the relay: %v %q %q", err, r.Stdout, r.Stderr)
	}
	sb.Close(ctx)
	if _, err := l.Accept(); err == nil {
		t.Error("the listener outlived its sandbox")
	}

	plain, err := New(WithIsolation(false))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	open := start(t, plain, sandbox.Spec{})
	if _, err := open.Relay(ctx); !errors.Is(err, mux.ErrNoRelay) {
		t.Errorf("a sandbox without isolation: %v, want ErrNoRelay", err)
	}
}

// relayClient is a Python client in the sandbox: n requests of size bytes
// on one connection; it prints the median round trip in milliseconds.
const relayClient = `import http.client, statistics, sys, time
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port)
ts = []
for _ in range(n):
    t = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=b"x" * size)
    assert c.getresponse().read().startswith(b"yyyy")
    ts.append(time.perf_counter() - t)
print(statistics.median(ts) * 1e3)
`

// BenchmarkRelayRoundTrip: HTTP requests from a client in the sandbox to
// a server of the host through the relay, as an installed agent's CLI
// reaches the model gateway: one connection, a small request and one the
// size of a long conversation, a 2 KiB answer. Each op is 50 requests;
// the metric is the median round trip the client measured, Python's own
// time and the host handler's (microseconds) included.
func BenchmarkRelayRoundTrip(b *testing.B) {
	be := newBackend(b)
	sb := benchSandbox(b, be)
	_, port := serveRelay(b, sb, strings.Repeat("y", 2048))
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "/tmp/relay.py", []byte(relayClient), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var ms []float64
			for b.Loop() {
				r, err := sb.Agent().Exec(ctx, fmt.Sprintf("python3 /tmp/relay.py %s 50 %d", port, size), sandbox.ExecOptions{})
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("%v %d %s %s", err, r.ExitCode, r.Stdout, r.Stderr)
				}
				v, _ := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
				ms = append(ms, v)
			}
			slices.Sort(ms)
			b.ReportMetric(ms[len(ms)/2], "ms/roundtrip")
		})
	}
}
