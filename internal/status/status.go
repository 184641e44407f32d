// Package status notes the final status of a response as a handler writes it,
// for the core's pass-through (its observer) and the proxy's access log: one
// reading of "the status a client got" for both.
package status

import "net/http"

// Writer passes everything to the ResponseWriter it wraps and notes the
// final status: the first one of 200 or more, or 101 (a protocol switch is
// the final answer of an upgrade); informational answers (100, 103) are not
// final. A body written with no status is 200, as net/http sends it.
type Writer struct {
	http.ResponseWriter
	Status int // 0 until a final status or a body is written
}

// WriteHeader notes code when it is the response's final status.
func (w *Writer) WriteHeader(code int) {
	if w.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write notes 200 when nothing was written before.
func (w *Writer) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (Flush, Hijack,
// deadlines), as httputil.ReverseProxy needs it.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush serves code that asserts http.Flusher rather than using a
// ResponseController.
func (w *Writer) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Final is the status the client got: the one noted, or 200 when the handler
// returned without writing anything (net/http then sends 200).
func (w *Writer) Final() int {
	if w.Status == 0 {
		return http.StatusOK
	}
	return w.Status
}
