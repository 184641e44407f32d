package frameworks_test

import (
	"fmt"
	"net/http"

	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/examples/frameworks"
	"github.com/idemproxy/idemproxy/middleware"
	"github.com/labstack/echo/v5"
)

// echo, with EchoMiddleware: a replay and a 422 answered by the core through
// echo's response, which echo's own middleware before it sees; an error the
// handler returns (echo.NewHTTPError(400, …)) is answered by echo's error
// handler inside the core, so that 400 is stored and replayed.
func ExampleEchoMiddleware() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store)

	var logged []int // what echo's request logger would see
	charges := 0
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			err := next(c)
			res, _ := echo.UnwrapResponse(c.Response())
			logged = append(logged, res.Status)
			return err
		}
	})
	e.Use(frameworks.EchoMiddleware(idem))
	e.POST("/charges", func(c *echo.Context) error {
		var in struct {
			Amount int `json:"amount"`
		}
		if err := c.Bind(&in); err != nil {
			return err
		}
		if in.Amount <= 0 {
			return echo.NewHTTPError(http.StatusBadRequest, "amount must be positive")
		}
		charges++
		return c.JSON(http.StatusCreated, map[string]int{"charge": charges, "amount": in.Amount})
	})

	send(e, "/charges", "order-1", `{"amount":100}`)
	send(e, "/charges", "order-1", `{"amount":100}`) // a retry
	send(e, "/charges", "order-1", `{"amount":999}`) // the key reused
	send(e, "/charges", "order-2", `{"amount":0}`)
	send(e, "/charges", "order-2", `{"amount":0}`) // the 400, replayed
	fmt.Println("charges:", charges, "logged:", logged)
	// Output:
	// 201 replayed= {"amount":100,"charge":1}
	// 201 replayed=true {"amount":100,"charge":1}
	// 422 replayed= urn:idemproxy:problem:mismatch
	// 400 replayed= {"message":"amount must be positive"}
	// 400 replayed=true {"message":"amount must be positive"}
	// charges: 1 logged: [201 201 422 400 400]
}
