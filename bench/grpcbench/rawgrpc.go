package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/quota-platform/quota/bench/loadgen"
)

// The raw gRPC client (-grpc-client raw, the default) is a minimal gRPC
// client over HTTP/2 (h2c), made as lean as loadgen's raw HTTP/1.1 client
// and for the same reason: the load generator shares the machine's cores
// with quotad, and grpc-go's client (a reader and a writer goroutine per
// connection, a stream object, a context and flow-control bookkeeping
// with a BDP ping per answer) spends nearly as much CPU per call as the
// check costs quotad, which the comparison with HTTP would then measure.
//
// Each caller has its own connection and makes one call at a time on it,
// as each HTTP caller has its keep-alive connection. A call is one Write:
// a HEADERS frame whose header block is built once (requestHeads: a
// connection's first call adds the fields to the server's HPACK table,
// later calls refer to them there) and a DATA frame with the gRPC
// message, which the caller appends field by field into a reused buffer
// (appendRequest). The answer
// is read with golang.org/x/net/http2's Framer through a bufio.Reader and
// checked as a gRPC client must: :status 200, a gRPC content-type, one
// uncompressed message, grpc-status 0 in the trailers (any other status
// is a *grpcStatusError), and a RateLimitResponse whose overall_code the
// caller then checks.
//
// Flow control: the client opens its receive windows wide when it
// connects and tops up the connection's long before it runs out (with the
// next request: no extra write); it honours the send window the server
// grants. SETTINGS and PING are acknowledged when they arrive. Any error
// closes the connection, and the next call dials a new one; a call the
// server refused unprocessed (GOAWAY below its stream, REFUSED_STREAM) is
// sent again once on a new connection.

// rlsPath is ShouldRateLimit's HTTP/2 :path.
const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

const (
	// recvStreamWindow is the initial window of each stream the client
	// announces, which also bounds an answer's size: no stream window is
	// ever topped up.
	recvStreamWindow = 4 << 20
	// recvConnWindow is the connection's receive window once opened; it
	// is topped up when half of it is used.
	recvConnWindow = 1 << 30
	// maxHeaderString bounds a header name or value in an answer.
	maxHeaderString = 16 << 10
	// maxStreamID is the largest HTTP/2 stream id; past it the client
	// dials a new connection.
	maxStreamID = 1<<31 - 1
	// defaultWindow and defaultMaxFrame are HTTP/2's until the server's
	// SETTINGS say otherwise.
	defaultWindow   = 65535
	defaultMaxFrame = 16384
)

// rawGRPCTarget is what the raw clients of one run share.
type rawGRPCTarget struct {
	addr    string
	heads   requestHeads
	timeout time.Duration
	// stateless is set once a server announced a header table too small
	// for the request's fields: from then on every connection sends them
	// as literals without indexing.
	stateless atomic.Bool
}

func newRawGRPCTarget(addr string, timeout time.Duration) *rawGRPCTarget {
	return &rawGRPCTarget{addr: addr, heads: newRequestHeads(addr, rlsPath, timeout), timeout: timeout}
}

// requestHeads is the HPACK block of a unary call's request headers, as a
// gRPC client sends them (grpc-timeout as Envoy sends its filter's
// timeout, so that quotad does the work per call it does under Envoy),
// three ways: a connection's first call adds each field to the server's
// dynamic table (RFC 7541 6.2.1), every later call on it refers to them
// there in one byte each, as Envoy's and grpc-go's clients do; stateless
// is for a server whose table cannot hold them (literals without
// indexing, 6.2.2). The blocks are built once; a call only chooses.
type requestHeads struct {
	first, next, stateless []byte
	tableSize              uint32 // the dynamic table the fields need
}

func newRequestHeads(authority, path string, timeout time.Duration) requestHeads {
	fields := []struct {
		index       uint64 // the name's static table entry; 0: a literal name
		name, value string
	}{
		{4, ":path", path},
		{1, ":authority", authority},
		{31, "content-type", "application/grpc"},
		{0, "te", "trailers"},
		{58, "user-agent", "grpcbench"},
		{0, "grpc-timeout", grpcTimeout(timeout)},
	}
	// :method POST and :scheme http are static entries 3 and 6.
	h := requestHeads{first: []byte{0x83, 0x86}, next: []byte{0x83, 0x86}, stateless: []byte{0x83, 0x86}}
	for i, f := range fields {
		h.first = appendField(h.first, 6, 0x40, f.index, f.name, f.value)
		h.stateless = appendField(h.stateless, 4, 0x00, f.index, f.name, f.value)
		// The last field added is dynamic entry 62, the one before 63...
		h.next = appendHPACKInt(h.next, 7, 0x80, uint64(62+len(fields)-1-i))
		h.tableSize += uint32(len(f.name) + len(f.value) + 32)
	}
	return h
}

// appendField appends a literal header field whose representation has an
// n-bit prefix and pattern bits first: its name from static table entry
// index, or given literally when index is 0, then its value.
func appendField(b []byte, n uint, first byte, index uint64, name, value string) []byte {
	b = appendHPACKInt(b, n, first, index)
	if index == 0 {
		b = appendHPACKString(b, name)
	}
	return appendHPACKString(b, value)
}

// appendHPACKInt appends v with an n-bit prefix (RFC 7541 5.1), the
// prefix's other bits taken from first.
func appendHPACKInt(b []byte, n uint, first byte, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(limit))
	v -= limit
	for v >= 128 {
		b = append(b, byte(v&0x7f|0x80))
		v >>= 7
	}
	return append(b, byte(v))
}

// appendHPACKString appends s as a string literal without Huffman coding.
func appendHPACKString(b []byte, s string) []byte {
	return append(appendHPACKInt(b, 7, 0, uint64(len(s))), s...)
}

// grpcTimeout is d as a grpc-timeout value: at most 8 digits and a unit.
func grpcTimeout(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Second, "S"}, {time.Millisecond, "m"}, {time.Microsecond, "u"}} {
		if d%u.d == 0 && d/u.d < 1e8 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.unit
		}
	}
	return strconv.FormatInt(min(int64(d/time.Millisecond), 1e8-1), 10) + "m"
}

// grpcAnswer is what a caller checks of a RateLimitResponse.
type grpcAnswer struct {
	overall  int32 // overall_code
	statuses int   // how many descriptor statuses
}

// grpcStatusError is a call answered with a grpc-status other than OK.
type grpcStatusError struct {
	code codes.Code
	msg  string
}

func (e *grpcStatusError) Error() string {
	return "grpc status " + e.code.String() + ": " + e.msg
}

// malformedGRPCError is an answer that is not a valid gRPC response.
type malformedGRPCError struct{ msg string }

func (e *malformedGRPCError) Error() string { return "malformed gRPC response: " + e.msg }

// errUnprocessed is a call the server refused without processing it: it
// is sent again on a new connection.
var errUnprocessed = errors.New("stream refused unprocessed by the server")

// rawGRPC is one caller's raw gRPC client: its connection (nil until
// dialled, and after an error or the server's GOAWAY), reader, framer and
// buffers.
type rawGRPC struct {
	t     *rawGRPCTarget
	conn  net.Conn
	br    *bufio.Reader
	fr    *http2.Framer
	dec   *hpack.Decoder
	out   frameBuf // frames to send, written with the next Write
	resp  []byte   // the answer's DATA
	block []byte   // a header block being put together from its frames

	connState
	recvUnacked int64 // bytes received since the connection's window was last topped up

	h answerHead // the current call's headers and trailers
}

// answerHead is what a call's header blocks said.
type answerHead struct {
	blocks      int // header blocks read: 1 headers, 2 trailers
	status      string
	contentType string
	encoding    string
	grpcStatus  string
	grpcMessage string
	hasStatus   bool
}

// frameBuf collects the frames the framer writes, sent with one Write.
type frameBuf struct{ b []byte }

func (f *frameBuf) Write(p []byte) (int, error) {
	f.b = append(f.b, p...)
	return len(p), nil
}

func newRawGRPC(t *rawGRPCTarget) *rawGRPC {
	return &rawGRPC{
		t:    t,
		br:   bufio.NewReaderSize(nil, 16<<10),
		out:  frameBuf{b: make([]byte, 0, 1024)},
		resp: make([]byte, 0, 512),
	}
}

// call sends msg (a gRPC message: prefix and protobuf) to ShouldRateLimit
// and reads the answer, within the target's timeout from now. A status
// other than OK is a *grpcStatusError, and keeps the connection.
func (c *rawGRPC) call(msg []byte) (grpcAnswer, error) {
	deadline := time.Now().Add(c.t.timeout)
	for attempt := 0; ; attempt++ {
		if c.conn != nil && (c.goaway || c.nextStream > maxStreamID) {
			c.close()
		}
		fresh := c.conn == nil
		if fresh {
			if err := c.dial(deadline); err != nil {
				return grpcAnswer{}, err
			}
		} else if err := c.conn.SetDeadline(deadline); err != nil {
			c.close()
			return grpcAnswer{}, err
		}
		c.h = answerHead{}
		a, err := c.exchange(msg)
		var se *grpcStatusError
		if err == nil || errors.As(err, &se) {
			return a, err
		}
		c.close()
		// Sent again once: a call the server refused unprocessed, and one
		// on a kept connection the server closed while it was idle (EOF or
		// a reset before any of the answer), as loadgen's raw client does.
		if attempt == 0 && (errors.Is(err, errUnprocessed) || !fresh && c.h.blocks == 0 && staleConnError(err)) {
			continue
		}
		return a, err
	}
}

// staleConnError is what writing to, then reading from, a connection the
// peer closed gives.
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func (c *rawGRPC) dial(deadline time.Time) error {
	conn, err := loadgen.DialDeadline(c.t.addr, deadline)
	if err != nil {
		return err
	}
	c.conn = conn
	c.br.Reset(conn)
	// Framer and decoder hold per-connection state (frame order, the
	// dynamic table).
	c.fr = http2.NewFramer(&c.out, c.br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(defaultMaxFrame)
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(maxHeaderString)
	c.nextStream, c.goaway, c.recvUnacked = 1, false, 0
	c.stateless, c.added = c.t.stateless.Load(), false
	c.sendConn, c.sendStream, c.maxFrame = defaultWindow, defaultWindow, defaultMaxFrame
	// The preface goes out with the first request.
	c.out.b = append(c.out.b[:0], http2.ClientPreface...)
	if err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvStreamWindow},
	); err != nil {
		return err
	}
	return c.fr.WriteWindowUpdate(0, recvConnWindow-defaultWindow)
}

func (c *rawGRPC) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	c.out.b = c.out.b[:0]
}

// flush writes the frames collected.
func (c *rawGRPC) flush() error {
	_, err := c.conn.Write(c.out.b)
	c.out.b = c.out.b[:0]
	return err
}

// exchange sends msg on a new stream and reads the stream to its end.
func (c *rawGRPC) exchange(msg []byte) (grpcAnswer, error) {
	need := int64(len(msg))
	if len(msg) > int(c.maxFrame) {
		return grpcAnswer{}, errors.New("request larger than the server's frame size (not split)")
	}
	if need > c.sendStream {
		return grpcAnswer{}, errors.New("request larger than the server's stream window")
	}
	for need > c.sendConn { // wait for the server to grant the connection window
		if err := c.flush(); err != nil {
			return grpcAnswer{}, err
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return grpcAnswer{}, err
		}
		if err := c.control(f, 0); err != nil {
			return grpcAnswer{}, err
		}
		if c.goaway {
			return grpcAnswer{}, errUnprocessed
		}
	}
	id, head := c.newStream(c.t)
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: head, EndHeaders: true}); err != nil {
		return grpcAnswer{}, err
	}
	// The server's decoder adds the fields as it reads the block, whatever
	// becomes of the call.
	c.added = true
	if err := c.fr.WriteData(id, true, msg); err != nil {
		return grpcAnswer{}, err
	}
	c.sendConn -= need
	if err := c.flush(); err != nil {
		return grpcAnswer{}, err
	}
	c.resp = c.resp[:0]
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return grpcAnswer{}, err
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			c.recvUnacked += int64(f.Length)
			if f.StreamID != id {
				continue // a stream that ended already
			}
			if c.h.blocks != 1 {
				return grpcAnswer{}, &malformedGRPCError{"DATA outside the answer's headers and trailers"}
			}
			if len(c.resp)+len(f.Data()) > recvStreamWindow {
				return grpcAnswer{}, &malformedGRPCError{"answer over the stream window"}
			}
			c.resp = append(c.resp, f.Data()...)
			if f.StreamEnded() {
				return grpcAnswer{}, &malformedGRPCError{"stream ended without trailers"}
			}
		case *http2.HeadersFrame:
			if f.StreamID != id {
				return grpcAnswer{}, &malformedGRPCError{"HEADERS on a stream not in use"}
			}
			if err := c.readBlock(f); err != nil {
				return grpcAnswer{}, err
			}
			if f.StreamEnded() {
				return c.answer()
			}
			if c.h.blocks > 1 {
				return grpcAnswer{}, &malformedGRPCError{"trailers without END_STREAM"}
			}
		default:
			if err := c.control(f, id); err != nil {
				return grpcAnswer{}, err
			}
		}
	}
}

// control handles a frame that is not the stream's HEADERS or DATA, while
// stream id (0: none) is open.
func (c *rawGRPC) control(f http2.Frame, id uint32) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.applySettings(f, c.t); err != nil {
			return err
		}
		if err := c.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return c.flush()
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.fr.WritePing(true, f.Data); err != nil {
			return err
		}
		return c.flush()
	case *http2.WindowUpdateFrame:
		// A stream's own window only matters for its one DATA frame,
		// which the stream's initial window already let through.
		if f.StreamID == 0 {
			c.sendConn += int64(f.Increment)
		}
	case *http2.RSTStreamFrame:
		if f.StreamID != id {
			return nil
		}
		if f.ErrCode == http2.ErrCodeRefusedStream {
			return errUnprocessed
		}
		return fmt.Errorf("stream reset by the server: %v", f.ErrCode)
	case *http2.GoAwayFrame:
		c.goaway = true
		if id != 0 && f.LastStreamID < id {
			return errUnprocessed
		}
	default:
		return unexpectedFrame(f)
	}
	return nil
}

// readBlock decodes a header block: f's fragment and the CONTINUATION
// frames that follow it.
func (c *rawGRPC) readBlock(f *http2.HeadersFrame) error {
	c.h.blocks++
	var err error
	c.block, err = decodeHeaderBlock(c.fr, f, c.block, c.dec)
	return err
}

// emit keeps the fields of the answer's header blocks the client checks.
func (c *rawGRPC) emit(f hpack.HeaderField) { c.h.emit(f) }

// emit keeps f if it is a field the client checks.
func (h *answerHead) emit(f hpack.HeaderField) {
	switch f.Name {
	case ":status":
		if h.blocks == 1 {
			h.status = f.Value
		}
	case "content-type":
		h.contentType = f.Value
	case "grpc-encoding":
		h.encoding = f.Value
	case "grpc-status":
		h.grpcStatus, h.hasStatus = f.Value, true
	case "grpc-message":
		h.grpcMessage = f.Value
	}
}

// answer checks the ended stream's headers, status and message.
func (c *rawGRPC) answer() (grpcAnswer, error) {
	if c.recvUnacked >= recvConnWindow/2 { // sent with the next request
		if err := c.fr.WriteWindowUpdate(0, uint32(c.recvUnacked)); err != nil {
			return grpcAnswer{}, err
		}
		c.recvUnacked = 0
	}
	return checkAnswer(&c.h, c.resp)
}

// checkAnswer checks an ended stream's headers, status and message (resp,
// its DATA).
func checkAnswer(h *answerHead, resp []byte) (grpcAnswer, error) {
	if h.status != "200" {
		return grpcAnswer{}, &malformedGRPCError{"HTTP status " + strconv.Quote(h.status)}
	}
	if ct := h.contentType; ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
		return grpcAnswer{}, &malformedGRPCError{"content-type " + strconv.Quote(ct)}
	}
	if !h.hasStatus {
		return grpcAnswer{}, &malformedGRPCError{"no grpc-status"}
	}
	if h.grpcStatus != "0" {
		n, err := strconv.ParseUint(h.grpcStatus, 10, 32)
		if err != nil {
			return grpcAnswer{}, &malformedGRPCError{"grpc-status " + strconv.Quote(h.grpcStatus)}
		}
		return grpcAnswer{}, &grpcStatusError{code: codes.Code(n), msg: h.grpcMessage}
	}
	b := resp
	if len(b) < 5 || binary.BigEndian.Uint32(b[1:5]) != uint32(len(b)-5) {
		return grpcAnswer{}, &malformedGRPCError{"not exactly one length-prefixed message"}
	}
	if b[0] != 0 {
		return grpcAnswer{}, &malformedGRPCError{"compressed message (grpc-encoding " + strconv.Quote(h.encoding) + ") never asked for"}
	}
	return parseRateLimitResponse(b[5:])
}

// parseRateLimitResponse reads overall_code (field 1) and counts statuses
// (field 2) of a RateLimitResponse, checking the whole message's wire
// format.
func parseRateLimitResponse(b []byte) (grpcAnswer, error) {
	var a grpcAnswer
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return a, &malformedGRPCError{"bad protobuf tag"}
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return a, &malformedGRPCError{"bad overall_code"}
			}
			a.overall, n = int32(v), m
		case num == 2 && typ == protowire.BytesType:
			_, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return a, &malformedGRPCError{"bad status"}
			}
			a.statuses++
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return a, &malformedGRPCError{"bad protobuf field"}
			}
		}
		b = b[n:]
	}
	return a, nil
}

// decodeHeaderBlock puts f's header block together in block[:0] from its
// fragment and those of the CONTINUATION frames that follow it, and
// decodes it with dec.
func decodeHeaderBlock(fr *http2.Framer, f *http2.HeadersFrame, block []byte, dec *hpack.Decoder) ([]byte, error) {
	block = append(block[:0], f.HeaderBlockFragment()...)
	for ended := f.HeadersEnded(); !ended; {
		next, err := fr.ReadFrame()
		if err != nil {
			return block, err
		}
		cf, ok := next.(*http2.ContinuationFrame)
		if !ok || cf.StreamID != f.StreamID {
			return block, &malformedGRPCError{"header block not continued"}
		}
		if len(block)+len(cf.HeaderBlockFragment()) > recvStreamWindow {
			return block, &malformedGRPCError{"header block too large"}
		}
		block = append(block, cf.HeaderBlockFragment()...)
		ended = cf.HeadersEnded()
	}
	if _, err := dec.Write(block); err != nil {
		return block, err
	}
	return block, dec.Close()
}

// unexpectedFrame is the error of a frame no gRPC answer has here, or nil
// for one to ignore (PRIORITY and unknown types).
func unexpectedFrame(f http2.Frame) error {
	switch f.(type) {
	case *http2.PushPromiseFrame:
		return &malformedGRPCError{"PUSH_PROMISE with push disabled"}
	case *http2.ContinuationFrame:
		return &malformedGRPCError{"CONTINUATION outside a header block"}
	}
	return nil
}

// connState is what both raw clients keep of a connection: its next
// stream, and its server's limits and header table.
type connState struct {
	nextStream uint32
	added      bool   // the header fields are in the server's dynamic table
	sendConn   int64  // the connection's send window the server grants
	sendStream int64  // a new stream's send window (the server's SETTINGS)
	maxFrame   uint32 // the largest frame the server accepts
	goaway     bool   // the server is closing the connection
	stateless  bool   // header fields as literals without indexing
}

// applySettings applies the server's SETTINGS. A header table smaller than
// the one t's requests refer to makes t stateless, and this connection ends
// after its calls: entries it added or refers to may be evicted.
func (s *connState) applySettings(f *http2.SettingsFrame, t *rawGRPCTarget) error {
	return f.ForeachSetting(func(set http2.Setting) error {
		switch set.ID {
		case http2.SettingInitialWindowSize:
			s.sendStream = int64(set.Val)
		case http2.SettingMaxFrameSize:
			s.maxFrame = set.Val
		case http2.SettingHeaderTableSize:
			if set.Val < t.heads.tableSize && !s.stateless {
				t.stateless.Store(true)
				s.goaway = true
			}
		}
		return nil
	})
}

// newStream returns the next stream's id and its header block: the one
// that adds the fields to the server's table, the one that refers to them,
// or, stateless, literals.
func (s *connState) newStream(t *rawGRPCTarget) (uint32, []byte) {
	id := s.nextStream
	s.nextStream += 2
	switch {
	case s.stateless:
		return id, t.heads.stateless
	case s.added:
		return id, t.heads.next
	}
	return id, t.heads.first
}
