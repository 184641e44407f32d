package frameworks_test

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/idemproxy/idemproxy/cache/memstore"
	"github.com/idemproxy/idemproxy/examples/frameworks"
	"github.com/idemproxy/idemproxy/middleware"
)

// gin, with GinMiddleware: a replay and a 422 answered by the core through
// gin's writer, which gin's own middleware before it sees; a 400 the handler
// answers itself (c.AbortWithStatusJSON) is stored and replayed like any
// answer below 500.
func ExampleGinMiddleware() {
	store, _ := memstore.New(memstore.Options{})
	defer store.Close()
	idem, _ := middleware.New(store)

	gin.SetMode(gin.ReleaseMode)
	var logged []int // what gin's logger would see
	charges := 0
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Next(); logged = append(logged, c.Writer.Status()) })
	r.Use(frameworks.GinMiddleware(idem))
	r.POST("/charges", func(c *gin.Context) {
		var in struct {
			Amount int `json:"amount" binding:"required,min=1"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": "amount must be positive"})
			return
		}
		charges++
		c.JSON(http.StatusCreated, gin.H{"charge": charges, "amount": in.Amount})
	})

	send(r, "/charges", "order-1", `{"amount":100}`)
	send(r, "/charges", "order-1", `{"amount":100}`) // a retry
	send(r, "/charges", "order-1", `{"amount":999}`) // the key reused
	send(r, "/charges", "order-2", `{"amount":0}`)
	send(r, "/charges", "order-2", `{"amount":0}`) // the 400, replayed
	fmt.Println("charges:", charges, "logged:", logged)
	// Output:
	// 201 replayed= {"amount":100,"charge":1}
	// 201 replayed=true {"amount":100,"charge":1}
	// 422 replayed= urn:idemproxy:problem:mismatch
	// 400 replayed= {"error":"amount must be positive"}
	// 400 replayed=true {"error":"amount must be positive"}
	// charges: 1 logged: [201 201 422 400 400]
}
