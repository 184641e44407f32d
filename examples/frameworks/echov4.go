package frameworks

import (
	"net/http"

	"github.com/idemproxy/idemproxy/middleware"
	echov4 "github.com/labstack/echo/v4"
)

// EchoV4Middleware is EchoMiddleware for echo v4, whose Context is an
// interface, whose Response keeps its writer in a field, and whose c.Error
// calls the HTTPErrorHandler. The same reasons apply: not
// echo.WrapMiddleware(idem.Wrap).
func EchoV4Middleware(idem *middleware.Handler) echov4.MiddlewareFunc {
	return func(next echov4.HandlerFunc) echov4.HandlerFunc {
		return func(c echov4.Context) error {
			res, req := c.Response(), c.Request()
			defer func() { c.SetResponse(res); c.SetRequest(req) }()
			return idem.Handle(res, req, middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
				c.SetResponse(echov4.NewResponse(w, c.Echo()))
				c.SetRequest(r) // the body the core read, a context that outlives the client
				if err := next(c); err != nil {
					c.Error(err)
				}
				return nil
			}))
		}
	}
}
