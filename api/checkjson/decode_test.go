package checkjson

import (
	"encoding/json"
	"github.com/quota-platform/quota/internal/testsupport/checkreq"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quota-platform/quota/limiter"
)

func TestDecodeCheck_ReadsDimensionsAndReservedFields(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want limiter.Request
	}{
		{`{"app_id":"a1","ip":"203.0.113.7"}`, limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "app_id", Value: "a1"}, {Name: "ip", Value: "203.0.113.7"}}}},
		{` { "cost" : 7 , "dry_run" : true , "u" : "x" } `, limiter.Request{Cost: 7, DryRun: true, Dims: []limiter.Dim{{Name: "u", Value: "x"}}}},
		{`{"report":true,"dry_run":false}`, limiter.Request{Cost: 1, Report: true}},
		{`{"u":"\u00e9\n\"\\\/"}`, limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "u", Value: "é\n\"\\/"}}}},
		{`{"u":"\ud83d\ude00"}`, limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "u", Value: "😀"}}}},
		{`{"cost":1000000}`, limiter.Request{Cost: 1000000}},
		{`{}`, limiter.Request{Cost: 1}},
	}
	for _, tc := range cases {
		got, err := DecodeCheck([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
}

func TestDecodeCheck_RejectsWithTheRightCode(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, code string }{
		{`{"a":"x"`, "malformed_json"},
		{`{"a" "x"}`, "malformed_json"},
		{`{"a":"x",}`, "malformed_json"},
		{`{'a':'x'}`, "malformed_json"},
		{`{"a":"x"}}`, "malformed_json"},
		{`{"a":"` + "\x01" + `"}`, "malformed_json"},
		{`{"a":"\q"}`, "malformed_json"},
		{`{"a":"\u12"}`, "malformed_json"},
		{`{"a":"\udc00"}`, "invalid_encoding"},
		{`{"a":"\ud800\u0041"}`, "invalid_encoding"},
		{"{\"a\":\"\xc3\x28\"}", "invalid_encoding"},
		{`{"cost":01}`, "invalid_cost"},
		{`{"cost":-0}`, "invalid_cost"},
		{`{"cost":true}`, "invalid_cost"},
		{`{"cost":[1]}`, "invalid_cost"},
		{`{"cost":1,"cost":1}`, "invalid_field"},
		{`{"a":[]}`, "invalid_dimension"},
		{`{"a":true}`, "invalid_dimension"},
		{`{"1a":"x"}`, "invalid_dimension"},
		{`{"":"x"}`, "invalid_dimension"},
		{`null`, "invalid_body"},
		{`42`, "invalid_body"},
		{`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "malformed_json"},
	}
	for _, tc := range cases {
		_, err := DecodeCheck([]byte(tc.in))
		ie, ok := err.(*InputError)
		if !ok || ie.Code != tc.code {
			t.Errorf("%q: %v, want code %s", tc.in, err, tc.code)
		}
	}
}

func TestDecodeCheck_AtMost32Dimensions(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < 33; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"d` + strings.Repeat("x", i) + `":"v"`)
	}
	b.WriteString("}")
	if _, err := DecodeCheck([]byte(b.String())); err == nil {
		t.Fatal("33 dimensions accepted")
	}
}

// validRequest checks the invariants every accepted request must keep.
func FuzzDecodeCheck(f *testing.F) {
	for _, s := range []string{
		`{"app_id":"a1","ip":"203.0.113.7","user_id":"u42","interface_id":"users.get","cost":1}`,
		`{"u":"\ud83d\ude00","dry_run":true}`, `{"cost":1.5}`, `{"a":{"b":[1,2,{"c":null}]}}`, `[]`, `{"a":"\u00e9"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeCheck(data)
		if err != nil {
			if _, ok := err.(*InputError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		checkreq.RequireValid(t, req, MaxCost)
		// Whatever we accept is valid JSON in encoding/json's eyes too, and
		// says the same thing.
		if !json.Valid(data) || !utf8.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("encoding/json refuses what we accepted: %v", err)
		}
		for _, d := range req.Dims {
			if m[d.Name] != d.Value {
				t.Fatalf("dimension %s: %q, encoding/json says %q", d.Name, d.Value, m[d.Name])
			}
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`{"checks":[{"app_id":"a"},{"user_id":"u","cost":3}]}`))
	f.Add([]byte(`{"checks":[]}`))
	f.Add([]byte(`{"checks":[{"a":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, err := DecodeBatch(data)
		if err != nil {
			if _, ok := err.(*InputError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if len(reqs) < 1 || len(reqs) > MaxBatch {
			t.Fatalf("batch of %d accepted", len(reqs))
		}
		for _, r := range reqs {
			checkreq.RequireValid(t, r, MaxCost)
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
	})
}

// A check's names and values stay as read when the body's buffer is
// reused for the next request, escaped or not.
func TestDecodeCheck_StringsOutliveTheBodyBuffer(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"app_id":"a1","ip":"203.0.113.7","user_id":"u42","interface_id":"users.get"}`,
		`{"app_id":"a\u00e91","ip":"10.0.0.1","cost":3}`,
		`{"u":"x\"y","v":"plain"}`,
	} {
		buf := []byte(in)
		got, err := DecodeCheck(buf)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		want, err := DecodeCheck([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = '#'
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: after the buffer changed %+v, want %+v", in, got, want)
		}
	}
}

// BenchmarkDecodeCheck is one platform check's body read (what
// DecodeCheck's single copy of the body pays for).
func BenchmarkDecodeCheck(b *testing.B) {
	body := []byte(`{"app_id":"app-17","ip":"10.1.134.7","user_id":"user-40321","interface_id":"iface-12"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCheck(body); err != nil {
			b.Fatal(err)
		}
	}
}
