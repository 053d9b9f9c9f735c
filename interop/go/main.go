// Command driver runs franz-go (github.com/twmb/franz-go) against tidelog for the tests in
// tests/interop/test_franz_go.py.
//
// It reads one JSON command a line on stdin ({"id", "op", ...}) and writes one answer a
// line on stdout ({"id", "ok", "result" | "error", "message", "ms"}), as the Java driver
// (interop/java) does. Clients are kept by name: a kgo.Client for producing, consuming in
// a group, transactions and (through kadm) the admin calls, or a GroupTransactSession.
// Commands run one after the other; only a background producer (produce.start) runs
// beside them, until produce.stop. The client's log lines go to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

type command map[string]any

type handler func(d *driver, c command) (any, error)

var handlers = map[string]handler{}

func main() {
	d := newDriver()
	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]any{"ready": true, "franz_go": moduleVersion("github.com/twmb/franz-go")})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			out.Encode(map[string]any{"id": 0, "ok": false, "error": "BadCommand", "message": err.Error()})
			continue
		}
		if c.str("op") == "exit" {
			break
		}
		started := time.Now()
		answer := map[string]any{"id": c["id"]}
		h, known := handlers[c.str("op")]
		var result any
		var err error
		if !known {
			err = fmt.Errorf("unknown op %q", c.str("op"))
		} else {
			result, err = run(h, d, c)
		}
		if err != nil {
			answer["ok"] = false
			answer["error"], answer["message"] = errorKind(err), err.Error()
		} else {
			answer["ok"], answer["result"] = true, result
		}
		answer["ms"] = time.Since(started).Milliseconds()
		out.Encode(answer)
	}
	d.closeAll()
}

// run turns a panic in a handler (a bad command) into an error answer.
func run(h handler, d *driver, c command) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return h(d, c)
}

// errorKind is the Kafka error's name (kerr: "TOPIC_ALREADY_EXISTS") or the Go error's text.
func errorKind(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "Timeout"
	}
	return "Error"
}

func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, m := range info.Deps {
		if m.Path == path {
			return m.Version
		}
	}
	return "unknown"
}

var stderr = os.Stderr

// ---- reading commands

func (c command) str(key string) string {
	s, _ := c[key].(string)
	return s
}

func (c command) strOr(key, fallback string) string {
	if s, ok := c[key].(string); ok {
		return s
	}
	return fallback
}

func (c command) num(key string, fallback int64) int64 {
	if f, ok := c[key].(float64); ok {
		return int64(f)
	}
	return fallback
}

func (c command) flag(key string, fallback bool) bool {
	if b, ok := c[key].(bool); ok {
		return b
	}
	return fallback
}

func (c command) strs(key string) []string {
	raw, _ := c[key].([]any)
	out := make([]string, 0, len(raw))
	for _, v := range raw {
		out = append(out, v.(string))
	}
	return out
}

func (c command) sub(key string) command {
	m, _ := c[key].(map[string]any)
	return command(m)
}

func (c command) timeout(fallbackMs int64) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(c.num("timeout_ms", fallbackMs))*time.Millisecond)
}
