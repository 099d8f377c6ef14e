package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// The raw client (-client raw, the default) is a minimal HTTP/1.1
// keep-alive client, one per worker, so the load generator takes as little
// as it can of the CPU the server under test shares (net/http's client
// costs about as much per request as quotad's check; BENCHMARKS.md).
//
// It writes each request (head and body) with one Write on the worker's
// own connection, and reads the answer with the worker's bufio.Reader:
// status line, headers, and a body framed by Content-Length or chunked
// transfer coding (or, with neither, by the end of the connection). The
// request head is built once; Content-Length is appended per request into
// a reused buffer; the body lands in a reused buffer. In steady state a
// request allocates nothing.
//
// Any error closes the connection; the next request dials a new one.

// rawBufSize is the size of the response reader's buffer, and so the
// longest status or header line accepted.
const rawBufSize = 8 << 10

// rawMaxBody is the largest response body read; a larger one is malformed
// (a batch of 1000 answers is a few hundred kB).
const rawMaxBody = 16 << 20

// malformedError is a response the raw client cannot read as HTTP/1.1.
type malformedError struct{ msg string }

func (e *malformedError) Error() string { return "malformed HTTP response: " + e.msg }

// The malformed responses, preallocated: even an error exchange allocates
// little.
var (
	errBadStatusLine     = &malformedError{"bad status line"}
	errBadHeaderLine     = &malformedError{"bad header line"}
	errLineTooLong       = &malformedError{"status or header line longer than 8 KiB"}
	errBadLength         = &malformedError{"bad Content-Length"}
	errBodyTooLarge      = &malformedError{"body larger than 16 MiB"}
	errBadEncoding       = &malformedError{"unsupported Transfer-Encoding (only chunked is read)"}
	errBadChunk          = &malformedError{"bad chunk framing"}
	errSwitchProtocols   = &malformedError{"unexpected 101 Switching Protocols"}
	errTooManyInterims   = &malformedError{"too many 1xx responses"}
	errHeaderTooLarge    = &malformedError{"more than 1000 header lines"}
	errConflictingLength = &malformedError{"conflicting Content-Length values"}
)

// rawTarget is what every worker's raw client of one run shares.
type rawTarget struct {
	addr    string // host:port to dial
	head    []byte // request head up to and including "Content-Length: "
	timeout time.Duration
	opened  *atomic.Int64 // connections dialled successfully
}

// newRawTarget builds the request head for POSTs to endpoint (an http://
// URL) with the given bearer token.
func newRawTarget(endpoint, token string, timeout time.Duration, opened *atomic.Int64) (*rawTarget, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, errors.New("raw client: want an http://host:port URL, got " + endpoint)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	head := make([]byte, 0, 256)
	head = append(head, "POST "...)
	head = append(head, u.RequestURI()...)
	head = append(head, " HTTP/1.1\r\nHost: "...)
	head = append(head, u.Host...)
	head = append(head, "\r\nContent-Type: application/json\r\n"...)
	if token != "" {
		head = append(head, "Authorization: Bearer "...)
		head = append(head, token...)
		head = append(head, "\r\n"...)
	}
	head = append(head, "Content-Length: "...)
	return &rawTarget{
		addr:    net.JoinHostPort(u.Hostname(), port),
		head:    head,
		timeout: timeout,
		opened:  opened,
	}, nil
}

// rawConn is one worker's raw client: its connection (nil until dialled,
// and after an error or Connection: close), reader and buffers.
type rawConn struct {
	t      *rawTarget
	conn   net.Conn
	br     *bufio.Reader
	out    []byte // the request being sent: head, length, CRLF CRLF, body
	body   []byte // the last response's body
	served int    // responses read on conn
}

func newRawConn(t *rawTarget) *rawConn {
	return &rawConn{
		t:    t,
		br:   bufio.NewReaderSize(nil, rawBufSize),
		out:  make([]byte, 0, 512),
		body: make([]byte, 0, 1024),
	}
}

// rawAnswer is one response as the worker needs it.
type rawAnswer struct {
	status     int
	unenforced bool   // Quota-Enforced: false
	body       []byte // valid until the next roundTrip
}

// roundTrip sends a POST with body and reads the answer, within the
// target's timeout from now. inBody says whether err came while reading
// the body (the status line and headers were read).
func (c *rawConn) roundTrip(body []byte) (a rawAnswer, inBody bool, err error) {
	deadline := time.Now().Add(c.t.timeout)
	c.out = append(c.out[:0], c.t.head...)
	c.out = strconv.AppendInt(c.out, int64(len(body)), 10)
	c.out = append(c.out, "\r\n\r\n"...)
	c.out = append(c.out, body...)

	for attempt := 0; ; attempt++ {
		fresh := c.conn == nil
		if fresh {
			if err = c.dial(deadline); err != nil {
				return rawAnswer{}, false, err
			}
		} else if err = c.conn.SetDeadline(deadline); err != nil {
			c.close()
			return rawAnswer{}, false, err
		}
		var got bool // some of the response arrived
		a, got, inBody, err = c.exchange()
		if err == nil {
			return a, false, nil
		}
		c.close()
		// A kept-alive connection the server closed while it was idle
		// fails with EOF or a reset before any answer: send again, once,
		// on a new connection, as the request never reached a handler
		// that answered it.
		if attempt == 0 && !fresh && !got && staleConnError(err) {
			continue
		}
		return a, inBody, err
	}
}

// staleConnError is what writing to, then reading from, a connection the
// peer closed gives.
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// DialDeadline dials TCP addr by deadline and gives the connection that
// deadline, as the raw clients connect (bench/grpcbench's raw gRPC client
// too).
func DialDeadline(addr string, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func (c *rawConn) dial(deadline time.Time) error {
	conn, err := DialDeadline(c.t.addr, deadline)
	if err != nil {
		return err
	}
	c.t.opened.Add(1)
	c.conn = conn
	c.br.Reset(conn)
	c.served = 0
	return nil
}

func (c *rawConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// exchange writes c.out and reads one response. got says whether any
// byte of the response arrived.
func (c *rawConn) exchange() (a rawAnswer, got, inBody bool, err error) {
	if _, err = c.conn.Write(c.out); err != nil {
		return a, false, false, err
	}
	h, got, err := c.readHead()
	if err != nil {
		return a, got, false, err
	}
	c.body, err = c.readBody(c.body[:0], &h)
	if err != nil {
		return a, true, true, err
	}
	c.served++
	if h.close {
		c.close()
	}
	return rawAnswer{status: h.status, unenforced: h.unenforced, body: c.body}, true, false, nil
}

// rawHead is what the raw client keeps of a response's head.
type rawHead struct {
	status     int
	length     int64 // Content-Length; -1: none
	chunked    bool
	close      bool // close the connection after this response
	unenforced bool
}

// readHead reads the status line and headers, skipping 1xx interim
// responses.
func (c *rawConn) readHead() (h rawHead, got bool, err error) {
	for interim := 0; ; interim++ {
		if interim > 10 {
			return h, true, errTooManyInterims
		}
		line, err := c.readLine()
		if err != nil {
			return h, len(line) > 0 || interim > 0, err
		}
		h = rawHead{length: -1}
		var minor byte
		if h.status, minor, err = parseStatusLine(line); err != nil {
			return h, true, err
		}
		h.close = minor == '0' // HTTP/1.0 closes unless it says keep-alive
		if err := c.readHeaders(&h, minor); err != nil {
			return h, true, err
		}
		switch {
		case h.status == 101:
			return h, true, errSwitchProtocols
		case h.status >= 100 && h.status < 200:
			continue
		}
		return h, true, nil
	}
}

// readLine returns the next line without its line end (CRLF or LF). The
// line is valid until the next read.
func (c *rawConn) readLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return line, errLineTooLong
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseStatusLine reads "HTTP/1.x NNN reason" and returns the status and
// the minor version digit.
func parseStatusLine(line []byte) (status int, minor byte, err error) {
	// HTTP/1.1 200 OK: 12 bytes up to the code, then a space or the end.
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(line[7] != '0' && line[7] != '1') || (len(line) > 12 && line[12] != ' ') {
		return 0, 0, errBadStatusLine
	}
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return 0, 0, errBadStatusLine
		}
		status = status*10 + int(d-'0')
	}
	if status < 100 {
		return 0, 0, errBadStatusLine
	}
	return status, line[7], nil
}

// readHeaders reads header lines up to the blank line, keeping those the
// raw client acts on.
func (c *rawConn) readHeaders(h *rawHead, minor byte) error {
	for n := 0; ; n++ {
		if n > 1000 {
			return errHeaderTooLarge
		}
		line, err := c.readLine()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		colon := bytes.IndexByte(line, ':')
		// No name, whitespace before the colon, or an obsolete folded
		// continuation line: none is valid HTTP/1.1.
		if colon <= 0 || line[0] == ' ' || line[0] == '\t' || line[colon-1] == ' ' || line[colon-1] == '\t' {
			return errBadHeaderLine
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := parseLength(value)
			if !ok {
				return errBadLength
			}
			if h.length >= 0 && h.length != n {
				return errConflictingLength
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			// Only "chunked" alone is read; any other coding (gzip,
			// "gzip, chunked") would be misread, so it is an error.
			if !bytes.EqualFold(value, []byte("chunked")) || h.chunked {
				return errBadEncoding
			}
			h.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for rest := value; len(rest) > 0; {
				tok := rest
				if i := bytes.IndexByte(rest, ','); i >= 0 {
					tok, rest = rest[:i], rest[i+1:]
				} else {
					rest = nil
				}
				tok = trimOWS(tok)
				switch {
				case bytes.EqualFold(tok, []byte("close")):
					h.close = true
				case bytes.EqualFold(tok, []byte("keep-alive")) && minor == '0':
					h.close = false
				}
			}
		case bytes.EqualFold(name, []byte("Quota-Enforced")):
			h.unenforced = bytes.EqualFold(value, []byte("false"))
		}
	}
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseLength reads a Content-Length value: decimal digits, at most
// rawMaxBody.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
		if n > rawMaxBody {
			return 0, false
		}
	}
	return n, true
}

// readBody appends the body of the response h heads to dst.
func (c *rawConn) readBody(dst []byte, h *rawHead) ([]byte, error) {
	switch {
	case h.status < 200 || h.status == 204 || h.status == 304:
		return dst, nil
	case h.chunked:
		// Transfer-Encoding wins over Content-Length; a server sending both
		// may be confused, so the connection is not reused.
		if h.length >= 0 {
			h.close = true
		}
		return c.readChunked(dst)
	case h.length >= 0:
		return readN(c.br, dst, int(h.length))
	default:
		// No framing: the body runs to the end of the connection.
		h.close = true
		return c.readToEOF(dst)
	}
}

// readN appends exactly n bytes from r to dst.
func readN(r io.Reader, dst []byte, n int) ([]byte, error) {
	m := len(dst)
	if m+n > rawMaxBody {
		return dst, errBodyTooLarge
	}
	dst = slices.Grow(dst, n)[:m+n]
	k, err := io.ReadFull(r, dst[m:])
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the head promised a body
	}
	return dst[:m+k], err
}

func (c *rawConn) readChunked(dst []byte) ([]byte, error) {
	for {
		line, err := c.readLine()
		if err != nil {
			return dst, err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions are ignored
		}
		line = trimOWS(line)
		if len(line) == 0 || len(line) > 8 {
			return dst, errBadChunk
		}
		size := 0
		for _, d := range line {
			switch {
			case d >= '0' && d <= '9':
				size = size<<4 | int(d-'0')
			case d >= 'a' && d <= 'f':
				size = size<<4 | int(d-'a'+10)
			case d >= 'A' && d <= 'F':
				size = size<<4 | int(d-'A'+10)
			default:
				return dst, errBadChunk
			}
		}
		if size == 0 {
			// Trailer fields, if any, up to the blank line.
			for {
				line, err := c.readLine()
				if err != nil {
					return dst, err
				}
				if len(line) == 0 {
					return dst, nil
				}
			}
		}
		if dst, err = readN(c.br, dst, size); err != nil {
			return dst, err
		}
		// The chunk's data ends with exactly CRLF (as net/http checks).
		end, err := c.br.Peek(2)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
		if end[0] != '\r' || end[1] != '\n' {
			return dst, errBadChunk
		}
		_, _ = c.br.Discard(2)
	}
}

func (c *rawConn) readToEOF(dst []byte) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			if len(dst) >= rawMaxBody {
				return dst, errBodyTooLarge
			}
			dst = slices.Grow(dst, 4096)
		}
		n, err := c.br.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}
