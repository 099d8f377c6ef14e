package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// exchange is one check request and its answer, whichever HTTP server
// carries it: quotad's fasthttp edge (edge.go) or the Echo router (which
// serves the check routes when tracing wraps the net/http handler, and
// for users of Server.ServeHTTP). The check routes are written once,
// against this.
type exchange interface {
	context() context.Context
	// header is a request header's first value and how many values it has.
	header(name string) (string, int)
	contentLength() int64
	// body is the request body (at most MaxBody+1 bytes); release gives
	// its buffer back once nothing refers to it.
	body() (b []byte, release func(), err error)
	// answerBuffer is an empty buffer to append an answer's body to and
	// hand to answer.
	answerBuffer() []byte
	// answer writes status, the headers and a JSON body; body is the
	// exchange's from then on (the caller neither reads nor writes it).
	answer(status int, h answerHeaders, body []byte) error
}

// answerHeaders are an answer's headers besides Content-Type, their values
// formatted back to back: keys[i]'s value is text()[ends[i-1]:ends[i]].
// The values live in buf, and in big once they outgrow it, so that the
// headers hold no pointer into themselves: handed to an exchange by value
// they stay on the caller's stack (BenchmarkEdgeCheck: one allocation a
// check less than a pointer through the exchange interface).
type answerHeaders struct {
	n    int
	keys [8]string // textproto's canonical forms
	ends [8]int
	used int // bytes of buf in use while big is nil
	buf  [96]byte
	big  []byte
}

// text is the values back to back.
func (a *answerHeaders) text() []byte {
	if a.big != nil {
		return a.big
	}
	return a.buf[:a.used]
}

// fits reports whether n more bytes fit in buf (big is then nil).
func (a *answerHeaders) fits(n int) bool { return a.big == nil && a.used+n <= len(a.buf) }

// spill moves the values to big, for good.
func (a *answerHeaders) spill() {
	if a.big == nil {
		a.big = append(make([]byte, 0, 4*len(a.buf)), a.buf[:a.used]...)
	}
}

// (Neither method stores a slice of buf: a pointer into the headers
// themselves would move them to the heap.)

func (a *answerHeaders) addInt(key string, v int64) {
	if a.fits(20) {
		a.used = len(strconv.AppendInt(a.buf[:a.used], v, 10))
	} else {
		a.spill()
		a.big = strconv.AppendInt(a.big, v, 10)
	}
	a.end(key)
}

func (a *answerHeaders) add(key string, v []byte) {
	if a.fits(len(v)) {
		a.used += copy(a.buf[a.used:], v)
	} else {
		a.spill()
		a.big = append(a.big, v...)
	}
	a.end(key)
}

func (a *answerHeaders) end(key string) {
	a.keys[a.n], a.ends[a.n] = key, len(a.text())
	a.n++
}

// into sets the headers in h, all values cut from one string and their
// slices from one array: two allocations per answer instead of two per
// header (this runs on every check).
func (a *answerHeaders) into(h http.Header) {
	if a.n == 0 {
		return
	}
	text := string(a.text())
	vals := make([]string, a.n)
	start := 0
	for i := range a.n {
		vals[i] = text[start:a.ends[i]]
		h[a.keys[i]] = vals[i : i+1 : i+1]
		start = a.ends[i]
	}
}

// echoExchange is a check carried by Echo.
type echoExchange struct {
	s *Server
	c echo.Context
}

func (x echoExchange) context() context.Context { return x.c.Request().Context() }

func (x echoExchange) header(name string) (string, int) {
	vals := x.c.Request().Header[name]
	if len(vals) == 0 {
		return "", 0
	}
	return vals[0], len(vals)
}

func (x echoExchange) contentLength() int64 { return x.c.Request().ContentLength }

func (x echoExchange) body() ([]byte, func(), error) { return x.s.bodyBytes(x.c.Request()) }

// answerBuffer has room for two limits' answer (~270 B) at once.
func (x echoExchange) answerBuffer() []byte { return make([]byte, 0, 512) }

func (x echoExchange) answer(status int, h answerHeaders, body []byte) error {
	h.into(x.c.Response().Header())
	return writeJSON(x.c, status, body)
}
