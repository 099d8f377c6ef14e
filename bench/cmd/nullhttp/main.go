// Command nullhttp answers POST /v1/check with a fixed allowed answer and
// its rate-limit headers, doing no other work, on net/http (-server std)
// or fasthttp (-server fast). `make bench-http-edge` runs both under the
// same load, alternated, to show what each HTTP server costs a check by
// itself: the measurement behind quotad's fasthttp edge (api/edge.go).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/valyala/fasthttp"
)

const answer = `{"allowed":true,"rules":[{"rule":"app_ip_hourly","window":"1h","limit":10000,"remaining":9999,"reset_after_ms":1834000,"tier":"hot","allowed":true},` +
	`{"rule":"app_user_iface_hourly","window":"1h","limit":1000,"remaining":999,"reset_after_ms":1834000,"tier":"hot","allowed":true}]}` + "\n"

func main() {
	server := flag.String("server", "std", "std (net/http) or fast (fasthttp)")
	listen := flag.String("listen", "127.0.0.1:0", "address")
	flag.Parse()
	body := []byte(answer)
	var err error
	switch *server {
	case "std":
		err = http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			h["Ratelimit-Limit"] = []string{"1000"}
			h["Ratelimit-Remaining"] = []string{"999"}
			h["Ratelimit-Reset"] = []string{"1834"}
			_, _ = w.Write(body)
		}))
	case "fast":
		err = fasthttp.ListenAndServe(*listen, func(ctx *fasthttp.RequestCtx) {
			_ = ctx.PostBody()
			h := &ctx.Response.Header
			h.SetContentType("application/json")
			h.Set("Ratelimit-Limit", "1000")
			h.Set("Ratelimit-Remaining", "999")
			h.Set("Ratelimit-Reset", "1834")
			ctx.Response.SetBodyRaw(body)
		})
	default:
		err = fmt.Errorf("-server %q: want std or fast", *server)
	}
	fmt.Fprintln(os.Stderr, "nullhttp:", err)
	os.Exit(1)
}
