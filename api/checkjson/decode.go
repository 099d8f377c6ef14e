// Package checkjson reads the JSON bodies of POST /v1/check and
// /v1/check/batch into limiter requests, refusing what the contract
// refuses with the error code a 400 carries.
package checkjson

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// Limits on a check request.
const (
	MaxCost       = 1_000_000
	MaxDimsPerReq = 32
	MaxBatch      = 1000
)

// InputError is a client mistake: it becomes a 400 with its code.
type InputError struct {
	Code, Msg string
}

func (e *InputError) Error() string { return e.Msg }

// BadInput is an InputError of code with a formatted message.
func BadInput(code, format string, args ...any) *InputError {
	return &InputError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// DecodeCheck parses one check request: a flat JSON object whose fields are
// the reserved cost / dry_run / report and string dimensions. It is written
// by hand, not with encoding/json, because it must tell 1 from 1.0 and "1",
// reject invalid UTF-8 instead of replacing it, reject duplicate fields, and
// run on every call without reflection.
//
// The request's names and values are cut from one copy of b (b is the
// server's buffer, reused once the check is answered): one allocation for
// the strings of a check instead of one each (BenchmarkDecodeCheck).
// Whatever keeps one of them past the check copies it, as it would a
// string of a pooled body.
func DecodeCheck(b []byte) (limiter.Request, error) {
	p := parser{b: b, src: string(b)}
	p.space()
	req, err := p.check()
	if err != nil {
		return limiter.Request{}, err
	}
	p.space()
	if p.i != len(p.b) {
		return limiter.Request{}, BadInput("malformed_json", "unexpected data after the JSON object at byte %d", p.i)
	}
	return req, nil
}

// DecodeBatch parses `{"checks": [ {...}, ... ]}`.
func DecodeBatch(b []byte) ([]limiter.Request, error) {
	p := parser{b: b}
	p.space()
	if !p.eat('{') {
		return nil, BadInput("invalid_body", "the body must be a JSON object with a `checks` array")
	}
	var checks []limiter.Request
	seen := false
	p.space()
	if !p.eat('}') {
		for {
			p.space()
			name, err := p.str()
			if err != nil {
				return nil, err
			}
			p.space()
			if !p.eat(':') {
				return nil, p.syntax("':'")
			}
			p.space()
			if name != "checks" {
				return nil, BadInput("invalid_field", "unknown field %q: a batch has only `checks`", name)
			}
			if seen {
				return nil, BadInput("invalid_field", "field `checks` given twice")
			}
			seen = true
			if checks, err = p.checks(); err != nil {
				return nil, err
			}
			p.space()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return nil, p.syntax("',' or '}'")
			}
		}
	}
	p.space()
	if p.i != len(p.b) {
		return nil, BadInput("malformed_json", "unexpected data after the JSON object at byte %d", p.i)
	}
	if !seen {
		return nil, BadInput("invalid_body", "a batch needs a `checks` array")
	}
	if len(checks) == 0 || len(checks) > MaxBatch {
		return nil, BadInput("invalid_batch", "a batch has 1 to %d checks, got %d", MaxBatch, len(checks))
	}
	return checks, nil
}

type parser struct {
	b []byte
	i int
	// src, when set, is a copy of b: strings without escapes are cut
	// from it rather than copied each.
	src string
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) syntax(want string) error {
	if p.i >= len(p.b) {
		return BadInput("malformed_json", "unexpected end of JSON, expected %s", want)
	}
	return BadInput("malformed_json", "invalid JSON at byte %d: expected %s", p.i, want)
}

func (p *parser) checks() ([]limiter.Request, error) {
	if !p.eat('[') {
		return nil, BadInput("invalid_body", "`checks` must be an array")
	}
	var out []limiter.Request
	p.space()
	if p.eat(']') {
		return out, nil
	}
	for {
		p.space()
		req, err := p.check()
		if err != nil {
			if ie, ok := err.(*InputError); ok {
				return nil, BadInput(ie.Code, "checks[%d]: %s", len(out), ie.Msg)
			}
			return nil, err
		}
		out = append(out, req)
		if len(out) > MaxBatch {
			return nil, BadInput("invalid_batch", "a batch has 1 to %d checks, got more", MaxBatch)
		}
		p.space()
		if p.eat(']') {
			return out, nil
		}
		if !p.eat(',') {
			return nil, p.syntax("',' or ']'")
		}
	}
}

func (p *parser) check() (limiter.Request, error) {
	req := limiter.Request{Cost: 1}
	if !p.eat('{') {
		if p.i >= len(p.b) {
			return req, BadInput("malformed_json", "empty body: expected a JSON object")
		}
		return req, BadInput("invalid_body", "a check must be a JSON object")
	}
	var seenCost, seenDry, seenReport bool
	p.space()
	if p.eat('}') {
		return req, nil
	}
	for {
		p.space()
		name, err := p.str()
		if err != nil {
			return req, err
		}
		p.space()
		if !p.eat(':') {
			return req, p.syntax("':'")
		}
		p.space()
		switch name {
		case "cost":
			if seenCost {
				return req, BadInput("invalid_field", "field %q given twice", name)
			}
			seenCost = true
			if req.Cost, err = p.cost(); err != nil {
				return req, err
			}
		case "dry_run", "report":
			v, err := p.boolean(name)
			if err != nil {
				return req, err
			}
			if name == "dry_run" {
				if seenDry {
					return req, BadInput("invalid_field", "field %q given twice", name)
				}
				seenDry, req.DryRun = true, v
			} else {
				if seenReport {
					return req, BadInput("invalid_field", "field %q given twice", name)
				}
				seenReport, req.Report = true, v
			}
		default:
			if err := p.dim(&req, name); err != nil {
				return req, err
			}
		}
		p.space()
		if p.eat('}') {
			break
		}
		if !p.eat(',') {
			return req, p.syntax("',' or '}'")
		}
	}
	if req.DryRun && req.Report {
		return req, BadInput("invalid_field", "dry_run and report cannot both be true")
	}
	return req, nil
}

func (p *parser) dim(req *limiter.Request, name string) error {
	if !rules.ValidName(name) {
		return BadInput("invalid_dimension", "dimension name %q must match [a-z][a-z0-9_]{0,31}", truncate(name))
	}
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		if err := p.skipValue(); err != nil {
			return err
		}
		return BadInput("invalid_dimension", "dimension %q must be a string", name)
	}
	v, err := p.str()
	if err != nil {
		return err
	}
	if !rules.ValidValue(v) {
		return BadInput("invalid_dimension", "dimension %q must be 1-256 bytes of valid UTF-8", name)
	}
	if _, dup := req.Lookup(name); dup {
		return BadInput("invalid_field", "field %q given twice", name)
	}
	if len(req.Dims) >= MaxDimsPerReq {
		return BadInput("invalid_dimension", "at most %d dimensions per check", MaxDimsPerReq)
	}
	if req.Dims == nil {
		// Room for a typical check's dimensions at once, not 1, 2, 4.
		req.Dims = make([]limiter.Dim, 0, 6)
	}
	req.Dims = append(req.Dims, limiter.Dim{Name: name, Value: v})
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// cost reads a JSON integer literal (no fraction, no exponent) in 1..MaxCost.
func (p *parser) cost() (int64, error) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	isInt := p.i > digits && !(p.b[digits] == '0' && p.i-digits > 1)
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		isInt = false
	}
	if !isInt {
		p.i = start
		if err := p.skipValue(); err != nil {
			return 0, err
		}
		return 0, BadInput("invalid_cost", "cost must be an integer from 1 to %d", MaxCost)
	}
	n, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	if err != nil || n < 1 || n > MaxCost {
		return 0, BadInput("invalid_cost", "cost must be an integer from 1 to %d", MaxCost)
	}
	return n, nil
}

func (p *parser) boolean(name string) (bool, error) {
	switch {
	case p.lit("true"):
		return true, nil
	case p.lit("false"):
		return false, nil
	}
	if err := p.skipValue(); err != nil {
		return false, err
	}
	return false, BadInput("invalid_field", "%s must be true or false", name)
}

func (p *parser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// str reads a JSON string, rejecting invalid UTF-8 and lone surrogates.
func (p *parser) str() (string, error) {
	if !p.eat('"') {
		return "", p.syntax("a string")
	}
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", BadInput("invalid_encoding", "strings must be valid UTF-8")
			}
			if p.src != "" {
				return p.src[start : p.i-1], nil
			}
			return string(s), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", BadInput("malformed_json", "control character in string at byte %d", p.i)
		}
		p.i++
	}
	if p.i >= len(p.b) {
		return "", p.syntax("'\"'")
	}
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(buf) {
				return "", BadInput("invalid_encoding", "strings must be valid UTF-8")
			}
			return string(buf), nil
		case c < 0x20:
			return "", BadInput("malformed_json", "control character in string at byte %d", p.i)
		case c == '\\':
			var err error
			if buf, err = p.escape(buf); err != nil {
				return "", err
			}
		default:
			buf = append(buf, c)
			p.i++
		}
	}
	return "", p.syntax("'\"'")
}

func (p *parser) escape(buf []byte) ([]byte, error) {
	if p.i+1 >= len(p.b) {
		return nil, p.syntax("an escape")
	}
	e := p.b[p.i+1]
	p.i += 2
	switch e {
	case '"', '\\', '/':
		return append(buf, e), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return nil, BadInput("malformed_json", "invalid \\u escape at byte %d", p.i)
		}
		if utf16.IsSurrogate(r) {
			if !p.lit(`\u`) {
				return nil, BadInput("invalid_encoding", "lone UTF-16 surrogate in string")
			}
			r2, ok := p.hex4()
			if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
				return nil, BadInput("invalid_encoding", "invalid UTF-16 surrogate pair in string")
			}
		}
		return utf8.AppendRune(buf, r), nil
	}
	return nil, BadInput("malformed_json", "invalid escape \\%c at byte %d", e, p.i-1)
}

func (p *parser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// skipValue skips one JSON value of any type (so an error can say "must be
// a string" rather than "malformed JSON" when the JSON itself is fine).
func (p *parser) skipValue() error {
	return p.skipDepth(0)
}

func (p *parser) skipDepth(depth int) error {
	if depth > 32 {
		return BadInput("malformed_json", "JSON nested too deeply")
	}
	p.space()
	if p.i >= len(p.b) {
		return p.syntax("a value")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{' || c == '[':
		return p.skipContainer(depth, c)
	case p.lit("true"), p.lit("false"), p.lit("null"):
		return nil
	case c == '-' || c >= '0' && c <= '9':
		return p.skipNumber()
	}
	return p.syntax("a value")
}

func (p *parser) skipContainer(depth int, open byte) error {
	closing := byte('}')
	if open == '[' {
		closing = ']'
	}
	p.i++
	p.space()
	if p.eat(closing) {
		return nil
	}
	for {
		p.space()
		if open == '{' {
			if _, err := p.str(); err != nil {
				return err
			}
			p.space()
			if !p.eat(':') {
				return p.syntax("':'")
			}
		}
		if err := p.skipDepth(depth + 1); err != nil {
			return err
		}
		p.space()
		if p.eat(closing) {
			return nil
		}
		if !p.eat(',') {
			return p.syntax("',' or a closing bracket")
		}
	}
}

func (p *parser) skipNumber() error {
	start := p.i
	p.eat('-')
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			p.i++
			continue
		}
		break
	}
	if _, err := strconv.ParseFloat(string(p.b[start:p.i]), 64); err != nil {
		return BadInput("malformed_json", "invalid number at byte %d", start)
	}
	return nil
}
