package loadgen

import (
	"encoding/json"
	"testing"
)

func TestScanBatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		body          string
		allowed, deny int
		ok            bool
	}{
		{"one allowed", `{"results":[{"allowed":true,"rules":[]}]}`, 1, 0, true},
		{"empty", `{"results":[]}`, 0, 0, true},
		{"nested rule verdicts ignored",
			`{"results":[{"allowed":false,"rules":[{"rule":"r","allowed":false},{"rule":"s","allowed":true}]},` +
				`{"rules":[{"allowed":false}],"allowed":true}]}`, 1, 1, true},
		{"whitespace", "{ \"results\" : [ { \"allowed\" : true } ,\n\t{ \"allowed\" :false } ] }\n", 1, 1, true},
		{"tricky strings",
			`{"note":"{\"results\":[{\"allowed\":true}]}","results":[{"rules":[{"rule":"a\"]}{","tier":"hot"}],"allowed":false}]}`, 0, 1, true},
		{"other top-level arrays", `{"x":[{"allowed":true}],"results":[{"allowed":true}],"y":{"allowed":false}}`, 1, 0, true},
		{"result without allowed", `{"results":[{"allowed":true},{"rules":[]}]}`, 0, 0, false},
		{"allowed not a bool", `{"results":[{"allowed":"yes"}]}`, 0, 0, false},
		{"no results", `{"error":{"code":"bad","message":"no"}}`, 0, 0, false},
		{"results not an array", `{"results":{"allowed":true}}`, 0, 0, false},
		{"truncated", `{"results":[{"allowed":true}`, 0, 0, false},
		{"unterminated string", `{"results":[{"allowed":true}],"x":"abc`, 0, 0, false},
		{"unbalanced", `{"results":[]}]}`, 0, 0, false},
		{"two results arrays", `{"results":[{"allowed":true}],"results":[{"allowed":true}]}`, 0, 0, false},
		{"not json", `oops`, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, d, n, ok := scanBatch([]byte(tc.body))
			if ok != tc.ok || a != tc.allowed || d != tc.deny || (ok && n != a+d) {
				t.Fatalf("scanBatch = %d allowed, %d denied, %d results, ok %v; want %d, %d, ok %v",
					a, d, n, ok, tc.allowed, tc.deny, tc.ok)
			}
			if !ok {
				return
			}
			// The scan agrees with a real decode.
			var ref struct {
				Results []struct {
					Allowed bool `json:"allowed"`
				} `json:"results"`
			}
			if err := json.Unmarshal([]byte(tc.body), &ref); err != nil {
				t.Fatal(err)
			}
			wa := 0
			for _, r := range ref.Results {
				if r.Allowed {
					wa++
				}
			}
			if wa != a || len(ref.Results)-wa != d {
				t.Errorf("json.Unmarshal finds %d allowed of %d, scan %d of %d", wa, len(ref.Results), a, n)
			}
		})
	}
}
