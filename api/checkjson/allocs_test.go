//go:build !race

package checkjson

import "testing"

// A check's names and values are cut from one copy of its body: the copy
// and the dimensions' slice, whatever the number of fields.
func TestDecodeCheck_TwoAllocations(t *testing.T) {
	body := []byte(`{"app_id":"app-17","ip":"10.1.134.7","user_id":"user-40321","interface_id":"iface-12","cost":2}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeCheck(body); err != nil {
			t.Fatal(err)
		}
	}); n != 2 {
		t.Fatalf("%v allocations a check, want 2", n)
	}
}
