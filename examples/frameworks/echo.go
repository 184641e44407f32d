package frameworks

import (
	"net/http"

	"github.com/idemproxy/idemproxy/middleware"
	"github.com/labstack/echo/v5"
)

// EchoMiddleware is idem as echo (v5) middleware: e.Use(EchoMiddleware(idem)),
// or on a group or a route. The core answers a duplicate itself (a replay, 409,
// 422) through echo's response; a first execution runs the rest of the chain
// with a response that records what it writes. An error the chain returns is
// answered there, by echo's HTTPErrorHandler, so that answer is recorded too: a
// 4xx (echo.NewHTTPError(400, …), a binding error) is stored and replayed like
// one the handler wrote, a 5xx releases the key so the retry runs again.
//
// Not echo.WrapMiddleware(idem.Wrap): with it, the chain's error is answered
// after the core has finished, so the core stores an empty 200 for it
// (TestEchoWrapMiddlewareStoresAnErrorAs200).
func EchoMiddleware(idem *middleware.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			res, req := c.Response(), c.Request()
			defer func() { c.SetResponse(res); c.SetRequest(req) }()
			return idem.Handle(res, req, middleware.NextFunc(func(w http.ResponseWriter, r *http.Request) error {
				c.SetResponse(echo.NewResponse(w, c.Echo().Logger))
				c.SetRequest(r) // the body the core read, a context that outlives the client
				if err := next(c); err != nil {
					c.Echo().HTTPErrorHandler(c, err)
				}
				return nil
			}))
		}
	}
}
