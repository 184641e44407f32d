package middleware

import "net/http"

// passThrough calls next untracked, noting the status for the observer.
func (h *Handler) passThrough(w http.ResponseWriter, r *http.Request, next Next, ev *Event) error {
	sw := &statusWriter{ResponseWriter: w}
	err := next.ServeHTTP(sw, r)
	ev.Status = sw.status
	if ev.Status == 0 && err == nil {
		ev.Status = http.StatusOK
	}
	if err != nil && ev.Err == nil {
		ev.Err = err
	}
	return err
}

// statusWriter notes the status of a response passed through untracked.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 && code >= 200 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(p []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.ResponseWriter.Write(p)
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

func (sw *statusWriter) Flush() { _ = http.NewResponseController(sw.ResponseWriter).Flush() }
