package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quota-platform/quota/api/checkjson"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/checkreq"
)

// FuzzDecodeAuth: whatever the headers, DecodeAuth gives an input error or
// a valid check whose dimensions are exactly the non-empty mapped headers.
func FuzzDecodeAuth(f *testing.F) {
	f.Add("a1", "u42", "203.0.113.7", "1", false)
	f.Add("", "", "", "", false)
	f.Add("a\xff", "u", "", "0", true)
	f.Add(strings.Repeat("x", 257), "u", "ip", "1000000", false)
	f.Add("a", "", "", "+5", true)
	m := config.Defaults().AuthHeaders
	f.Fuzz(func(t *testing.T, app, user, ip, cost string, twice bool) {
		h := http.Header{}
		for k, v := range map[string]string{"X-App-Id": app, "X-User-Id": user, "X-Real-Ip": ip, "X-Quota-Cost": cost} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		if twice && app != "" {
			h["X-App-Id"] = append(h["X-App-Id"], app)
		}
		req, err := DecodeAuth(h, m)
		if err != nil {
			if _, ok := err.(*checkjson.InputError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		checkreq.RequireValid(t, req, checkjson.MaxCost)
		if twice && app != "" {
			t.Fatal("a header given twice was accepted")
		}
		for _, d := range req.Dims {
			if got := map[string]string{"app_id": app, "user_id": user, "ip": ip}[d.Name]; got != d.Value {
				t.Fatalf("dimension %s=%q from header %q", d.Name, d.Value, got)
			}
		}
	})
}
