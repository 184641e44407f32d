package frameworks

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/idemproxy/idemproxy/middleware"
)

// GinMiddleware is idem as gin middleware: r.Use(GinMiddleware(idem)), or on a
// group or a route. The core answers a duplicate itself (a replay, 409, 422)
// through gin's writer and aborts the chain; a first execution runs the rest of
// the chain (c.Next) with c.Writer recording what the handlers write, so an
// answer from c.JSON or c.AbortWithStatusJSON is stored like any other.
func GinMiddleware(idem *middleware.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.FullPath() == "" {
			return // no route: gin answers 404 (or 405) after the chain, nothing runs
		}
		writer, req := c.Writer, c.Request
		defer func() { c.Writer, c.Request = writer, req }()
		ran := false
		_ = idem.Handle(writer, req, middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
			ran = true
			gw := &ginWriter{ResponseWriter: writer, w: w, status: writer.Status(), size: -1}
			c.Writer, c.Request = gw, r // r: the body the core read, a context that outlives the client
			c.Next()
			gw.WriteHeaderNow() // a status set without a body: c.Status(204)
			return nil
		}))
		if !ran {
			c.Abort() // the core answered: the handlers must not run
		}
	}
}

// ginWriter is a gin.ResponseWriter over the core's writer. As gin's own, it
// starts from the status set so far and sends it with the first byte of the
// body (or WriteHeaderNow), so the headers a handler sets after c.Status are
// sent, and stored.
type ginWriter struct {
	gin.ResponseWriter                     // gin's writer, for CloseNotify and Pusher
	w                  http.ResponseWriter // the core's: it records the answer
	status, size       int                 // size -1: nothing sent yet
}

func (g *ginWriter) Header() http.Header { return g.w.Header() }

func (g *ginWriter) WriteHeader(code int) {
	if code > 0 && !g.Written() {
		g.status = code
	}
}

func (g *ginWriter) WriteHeaderNow() {
	if !g.Written() {
		g.size = 0
		g.w.WriteHeader(g.Status())
	}
}

func (g *ginWriter) Write(p []byte) (int, error) {
	g.WriteHeaderNow()
	n, err := g.w.Write(p)
	g.size += n
	return n, err
}

func (g *ginWriter) WriteString(s string) (int, error) { return g.Write([]byte(s)) }

func (g *ginWriter) Status() int   { return g.status }
func (g *ginWriter) Size() int     { return g.size }
func (g *ginWriter) Written() bool { return g.size >= 0 }

func (g *ginWriter) Flush() {
	g.WriteHeaderNow()
	_ = http.NewResponseController(g.w).Flush()
}

func (g *ginWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if g.size < 0 {
		g.size = 0
	}
	return http.NewResponseController(g.w).Hijack()
}

// Unwrap is for http.NewResponseController in a handler.
func (g *ginWriter) Unwrap() http.ResponseWriter { return g.w }

var _ gin.ResponseWriter = (*ginWriter)(nil)
