// Package browsertest is a headless Chromium for tests, driven over the
// Chrome DevTools Protocol: the operator console's tests load it, act on it
// and read it as an operator's browser would.
package browsertest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/idemproxy/idemproxy/internal/testutil"
)

// Browser is a headless Chromium, driven over the Chrome DevTools Protocol
// (its websocket, on a port Chromium picks): one page, the scripts it runs,
// and what went wrong in it (exceptions, console errors, policy
// violations).
type Browser struct {
	t  testing.TB
	ws *websocket.Conn

	mu       sync.Mutex
	next     int64
	waiting  map[int64]chan cdpMessage
	problems []string
}

type cdpMessage struct {
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// Path is the Chromium (or Chrome) on PATH; without one the test is
// skipped, and fails under CI=true (.ci/run installs Debian's chromium).
func Path(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found on PATH; CI must run the browser tests (install Debian's chromium)")
	}
	t.Skip("chromium not found on PATH; install chromium to run this test")
	return ""
}

// Start starts a headless Chromium with a throwaway profile, one
// page at about:blank, until the test ends.
func Start(t testing.TB) *Browser {
	t.Helper()
	bin := Path(t)
	profile := t.TempDir()
	const origin = "http://127.0.0.1" // what this client sends as its websocket Origin
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-dev-shm-usage", "--user-data-dir="+profile, "--remote-debugging-address=127.0.0.1",
		"--remote-debugging-port=0", "--remote-allow-origins="+origin, "--window-size=1200,800", "about:blank")
	logs := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b := &Browser{t: t, waiting: map[int64]chan cdpMessage{}}
	t.Cleanup(func() {
		if b.ws != nil {
			b.ws.Close()
		}
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("chromium log:\n%s", logs)
		}
	})
	// Chromium writes the port it bound, and the browser's path, in its profile.
	var port string
	testutil.Eventually(t, 30*time.Second, "chromium's DevToolsActivePort", func() bool {
		select {
		case <-exited:
			t.Fatalf("chromium exited before it listened:\n%s", logs)
		default:
		}
		s, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if line, _, _ := strings.Cut(string(s), "\n"); err == nil && line != "" && strings.Contains(string(s), "\n") {
			port = line
			return true
		}
		return false
	})
	var targets []struct {
		Type, URL            string
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
	if err != nil {
		t.Fatalf("chromium's target list: %v", err)
	}
	err = json.NewDecoder(resp.Body).Decode(&targets)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("chromium's target list: %v", err)
	}
	page := ""
	for _, tg := range targets {
		if tg.Type == "page" {
			page = tg.WebSocketDebuggerURL
		}
	}
	if page == "" {
		t.Fatalf("chromium has no page: %+v", targets)
	}
	if b.ws, err = websocket.Dial(page, "", origin); err != nil {
		t.Fatalf("chromium's page websocket: %v", err)
	}
	go b.read()
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		b.Call(m, nil, nil)
	}
	b.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1200, "height": 760, "deviceScaleFactor": 1, "mobile": false}, nil)
	// A policy violation is reported to the page, not always to the log.
	b.Call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `document.addEventListener('securitypolicyviolation', (e) => console.error('policy violation: ' + e.violatedDirective + ' ' + e.blockedURI))`}, nil)
	return b
}

func (b *Browser) read() {
	for {
		var m cdpMessage
		if err := websocket.JSON.Receive(b.ws, &m); err != nil {
			b.mu.Lock()
			for id, c := range b.waiting {
				close(c)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		if c, ok := b.waiting[m.ID]; ok && m.Method == "" {
			delete(b.waiting, m.ID)
			c <- m
		} else if p := problem(m); p != "" {
			b.problems = append(b.problems, p)
		}
		b.mu.Unlock()
	}
}

// problem is what an event says went wrong on the page, if anything: an
// exception, an error on the console, an error logged other than a network
// answer's status (the tests expect some 401s and 404s).
func problem(m cdpMessage) string {
	switch m.Method {
	case "Runtime.exceptionThrown":
		return "exception: " + string(m.Params)
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value any `json:"value"`
			} `json:"args"`
		}
		if json.Unmarshal(m.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
			return fmt.Sprintf("console.%s: %v", p.Type, p.Args)
		}
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Source, Level, Text string
			} `json:"entry"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Entry.Level == "error" && p.Entry.Source != "network" {
			return p.Entry.Source + ": " + p.Entry.Text
		}
	}
	return ""
}

// Problems is what went wrong on the page so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// Call sends one DevTools command and decodes its result into result (when
// not nil); it fails the test on an error or after 30 s.
func (b *Browser) Call(method string, params, result any) {
	b.t.Helper()
	b.mu.Lock()
	b.next++
	id := b.next
	c := make(chan cdpMessage, 1)
	b.waiting[id] = c
	b.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	if err := websocket.JSON.Send(b.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	select {
	case m, ok := <-c:
		switch {
		case !ok:
			b.t.Fatalf("%s: chromium closed the connection", method)
		case m.Error != nil:
			b.t.Fatalf("%s: %s", method, m.Error.Message)
		case result != nil:
			if err := json.Unmarshal(m.Result, result); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
	case <-time.After(30 * time.Second):
		b.t.Fatalf("%s: no answer from chromium in 30 s", method)
	}
}

// Navigate loads url in the page and waits for its document to be ready.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.NavigateFrom(url, "")
}

// NavigateFrom is Navigate as if following a link on the page at referrer
// (none when empty).
func (b *Browser) NavigateFrom(url, referrer string) {
	b.t.Helper()
	var r struct {
		ErrorText string `json:"errorText"`
	}
	params := map[string]any{"url": url}
	if referrer != "" {
		params["referrer"] = referrer
	}
	b.Call("Page.navigate", params, &r)
	if r.ErrorText != "" {
		b.t.Fatalf("navigating to %s: %s", url, r.ErrorText)
	}
	b.WaitFor(`document.readyState === 'complete'`, 15*time.Second)
}

// Eval runs the JavaScript expression js in the page (awaiting it, if it is
// a promise) and decodes its value into out (when not nil); it fails the
// test if it throws.
func (b *Browser) Eval(js string, out any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.Call("Runtime.evaluate", map[string]any{"expression": js, "awaitPromise": true, "returnByValue": true, "userGesture": true}, &r)
	if r.Exception != nil {
		b.t.Fatalf("evaluating %s: %s %s", js, r.Exception.Text, r.Exception.Exception.Description)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("evaluating %s: its value %s: %v", js, r.Result.Value, err)
		}
	}
}

// WaitFor polls the JavaScript expression js until it is true; it fails the
// test after d, with the page's text.
func (b *Browser) WaitFor(js string, d time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		var ok bool
		b.Eval("!!("+js+")", &ok)
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			var text string
			b.Eval(`document.body ? document.body.innerText : ''`, &text)
			b.t.Fatalf("waited %v for %s; the page reads:\n%s\nproblems: %q", d, js, text, b.Problems())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Screenshot is the page as PNG: the viewport's width, the body's height.
func (b *Browser) Screenshot() []byte {
	b.t.Helper()
	var size struct{ Width, Height float64 }
	b.Eval(`({Width: document.documentElement.clientWidth, Height: Math.ceil(document.body.getBoundingClientRect().height) + 16})`, &size)
	var r struct {
		Data string `json:"data"`
	}
	b.Call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": size.Width, "height": size.Height, "scale": 1}}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}
