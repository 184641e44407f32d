package status

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWriterNotesTheFinalStatus(t *testing.T) {
	cases := []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"nothing written", func(http.ResponseWriter) {}, 200},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")) }, 200},
		{"201", func(w http.ResponseWriter) { w.WriteHeader(201) }, 201},
		{"informational first", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(404) }, 404},
		{"100 continue first", func(w http.ResponseWriter) { w.WriteHeader(100); _, _ = w.Write([]byte("x")) }, 200},
		{"protocol switch", func(w http.ResponseWriter) { w.WriteHeader(101) }, 101},
		{"second status ignored", func(w http.ResponseWriter) { w.WriteHeader(500); w.WriteHeader(200) }, 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sw := &Writer{ResponseWriter: httptest.NewRecorder()}
			c.write(sw)
			if got := sw.Final(); got != c.want {
				t.Errorf("Final() = %d, want %d", got, c.want)
			}
		})
	}
}

func TestWriterFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := &Writer{ResponseWriter: rec}
	var _ http.Flusher = sw
	sw.Flush()
	if !rec.Flushed {
		t.Error("Flush did not reach the recorder")
	}
	if err := http.NewResponseController(sw).Flush(); err != nil {
		t.Errorf("a ResponseController cannot flush through Unwrap: %v", err)
	}
}
