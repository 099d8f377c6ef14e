package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/quota-platform/quota/client"
)

func ExampleClient_Check() {
	// Share one Client: it keeps its connections. Calls without a deadline
	// of their own get the client's timeout; FailClosed returns an error
	// when quota cannot answer (FailOpen, the default, allows the call).
	c := client.New(quotaURL, client.WithTimeout(5*time.Second), client.WithFailMode(client.FailClosed))
	for i := 0; i < 3; i++ {
		d, err := c.Check(context.Background(), client.CheckRequest{
			Dimensions: map[string]string{"user_id": "ex-check"},
		})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("allowed=%v remaining=%d Retry-After=%q\n", d.Allowed, d.Rules[0].Remaining, d.Header.Get("Retry-After"))
	}
	// Output:
	// allowed=true remaining=1 Retry-After=""
	// allowed=true remaining=0 Retry-After=""
	// allowed=false remaining=0 Retry-After="3600"
}

func ExampleClient_CheckBatch() {
	c := client.New(quotaURL, client.WithTimeout(5*time.Second), client.WithFailMode(client.FailClosed))
	ds, err := c.CheckBatch(context.Background(), []client.CheckRequest{
		{Dimensions: map[string]string{"user_id": "ex-batch"}, Cost: 2},
		{Dimensions: map[string]string{"user_id": "ex-batch"}},
		{Dimensions: map[string]string{"user_id": "ex-batch-other"}},
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, d := range ds {
		fmt.Println(d.Allowed, d.Rules[0].Remaining)
	}
	// Output:
	// true 0
	// false 0
	// true 1
}

func ExampleClient_Auth() {
	c := client.New(quotaURL, client.WithTimeout(5*time.Second), client.WithFailMode(client.FailClosed))
	h := http.Header{}
	h.Set("X-App-Id", "ex-auth")
	h.Set("X-Real-IP", "203.0.113.7")
	h.Set("X-Quota-Cost", "9")
	d, _ := c.Auth(context.Background(), h)
	fmt.Println(d.Allowed, d.Header.Get("RateLimit-Remaining"))
	d, _ = c.Auth(context.Background(), h)
	fmt.Println(d.Allowed, d.Header.Get("Retry-After"))
	// Output:
	// true 1
	// false 3600
}

func ExampleAPIError() {
	c := client.New(quotaURL, client.WithTimeout(5*time.Second), client.WithFailMode(client.FailClosed))
	_, err := c.Check(context.Background(), client.CheckRequest{
		Dimensions: map[string]string{"User-Id": "not a dimension name"},
	})
	var ae *client.APIError
	if errors.As(err, &ae) {
		fmt.Println(ae.Status, ae.Code)
	}
	// Output:
	// 400 invalid_dimension
}
