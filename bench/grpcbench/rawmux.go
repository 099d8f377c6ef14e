package main

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/quota-platform/quota/bench/loadgen"
)

// rawMux is the raw client's multiplexed mode (-grpc-conns below -c): the
// callers share a few HTTP/2 connections, each call a stream of its own,
// as Envoy's rate limit filter shares one connection per worker thread
// among the calls of that thread. It sends a call exactly as rawGRPC does
// (the same header blocks, one Write of HEADERS and DATA) and checks the
// answer the same way (checkAnswer); what differs is that a reader
// goroutine per connection reads the frames and hands each stream's answer
// to its caller. Kept over grpc-go's client on as many connections: it
// costs the shared cores 15–17 µs a call against 42–51 (make bench-grpc
// with GRPCBENCH_ARGS="-entries grpc,grpc-mux -grpc-client grpc-go
// -grpc-conns 4", closed loop).
type rawMux struct {
	t  *rawGRPCTarget
	mu sync.Mutex // guards the fields of rawMux and its muConns but the reader's own
	c  *muConn    // the connection new calls go on; nil until dialled, and after it failed or the server's GOAWAY
	// window is signalled when a connection's send window grows or the
	// connection fails.
	window *sync.Cond
}

// muConn is one connection of a rawMux.
type muConn struct {
	conn net.Conn
	fr   *http2.Framer // written under rawMux.mu, read by the reader only
	out  frameBuf
	err  error // why the connection ended; nil while it serves

	pending map[uint32]*muCall
	connState

	// The reader's own.
	dec         *hpack.Decoder
	block       []byte
	cur         *muCall // the call whose header block is being decoded
	recvUnacked int64
}

// muCall is a caller's call in flight; the caller makes one at a time.
type muCall struct {
	h    answerHead
	resp []byte
	done chan error // the call's end: nil, or the error that ended it
}

func newRawMux(t *rawGRPCTarget) *rawMux {
	m := &rawMux{t: t}
	m.window = sync.NewCond(&m.mu)
	return m
}

func newMuCall() *muCall {
	return &muCall{resp: make([]byte, 0, 512), done: make(chan error, 1)}
}

// muClient is one caller of a rawMux.
type muClient struct {
	m  *rawMux
	cl *muCall
}

func newMuClient(m *rawMux) *muClient { return &muClient{m: m, cl: newMuCall()} }

// call sends msg on a stream of its own and waits for its answer, within
// the target's timeout. A call the server refused unprocessed is sent once
// more.
func (k *muClient) call(msg []byte) (grpcAnswer, error) {
	deadline := time.Now().Add(k.m.t.timeout)
	for attempt := 0; ; attempt++ {
		a, ended, err := k.m.try(k.cl, msg, deadline)
		if !ended {
			// A call that did not end with its stream (a timeout, a
			// failed connection) may still be in the hands of a reader:
			// the next one gets a muCall of its own.
			k.cl = newMuCall()
		}
		if attempt == 0 && errors.Is(err, errUnprocessed) {
			continue
		}
		return a, err
	}
}

// try is one attempt of a call; ended says whether it ended with its
// stream's trailers (the reader is done with cl).
func (m *rawMux) try(cl *muCall, msg []byte, deadline time.Time) (a grpcAnswer, ended bool, err error) {
	need := int64(len(msg))
	m.mu.Lock()
	c, id, err := m.send(cl, msg, need, deadline)
	m.mu.Unlock()
	if err != nil {
		return grpcAnswer{}, false, err
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err = <-cl.done:
	case <-timer.C:
		m.mu.Lock()
		if _, ok := c.pending[id]; ok {
			delete(c.pending, id)
			m.mu.Unlock()
			return grpcAnswer{}, false, errors.New("call timed out")
		}
		m.mu.Unlock()
		err = <-cl.done // the reader ended it meanwhile
	}
	if err != nil {
		return grpcAnswer{}, false, err
	}
	a, err = checkAnswer(&cl.h, cl.resp)
	return a, true, err
}

// send opens a stream for cl and writes msg on it, dialling first when
// there is no connection to use; m.mu is held.
func (m *rawMux) send(cl *muCall, msg []byte, need int64, deadline time.Time) (*muConn, uint32, error) {
	for {
		c := m.c
		if c != nil && (c.err != nil || c.goaway || c.nextStream > maxStreamID) {
			m.c, c = nil, nil // in-flight calls finish on it
		}
		if c == nil {
			var err error
			if c, err = m.dial(deadline); err != nil {
				return nil, 0, err
			}
			m.c = c
		}
		if len(msg) > int(c.maxFrame) || need > c.sendStream {
			return nil, 0, errors.New("request larger than the server's frame size or stream window")
		}
		if need > c.sendConn { // wait for the server to grant the connection window
			if time.Now().After(deadline) {
				return nil, 0, errors.New("call timed out waiting for the connection's send window")
			}
			m.window.Wait()
			continue
		}
		id, head := c.newStream(m.t)
		cl.h, cl.resp = answerHead{}, cl.resp[:0]
		c.pending[id] = cl
		err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: head, EndHeaders: true})
		c.added = true
		if err == nil {
			err = c.fr.WriteData(id, true, msg)
		}
		if err == nil {
			c.sendConn -= need
			err = c.flush()
		}
		if err != nil {
			delete(c.pending, id)
			c.fail(m, err)
			return nil, 0, err
		}
		return c, id, nil
	}
}

// dial connects, sends the preface and settings, and starts the reader; m.mu is held.
func (m *rawMux) dial(deadline time.Time) (*muConn, error) {
	conn, err := loadgen.DialDeadline(m.t.addr, deadline)
	if err != nil {
		return nil, err
	}
	// The connection outlives the call that dialled it: each call has a
	// timer of its own, and the dial's deadline would end the connection,
	// and every call on it, one timeout after it opened.
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, err
	}
	c := &muConn{
		conn: conn, pending: map[uint32]*muCall{},
		connState: connState{nextStream: 1, sendConn: defaultWindow, sendStream: defaultWindow, maxFrame: defaultMaxFrame,
			stateless: m.t.stateless.Load()},
	}
	c.fr = http2.NewFramer(&c.out, bufio.NewReaderSize(conn, 16<<10))
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(defaultMaxFrame)
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(maxHeaderString)
	c.out.b = append(c.out.b, http2.ClientPreface...)
	if err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvStreamWindow},
	); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.fr.WriteWindowUpdate(0, recvConnWindow-defaultWindow); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.flush(); err != nil {
		conn.Close()
		return nil, err
	}
	go c.read(m)
	return c, nil
}

// close ends the current connection; calls in flight on it fail.
func (m *rawMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c != nil {
		m.c.fail(m, errors.New("client closed"))
		m.c = nil
	}
}

func (c *muConn) flush() error {
	_, err := c.conn.Write(c.out.b)
	c.out.b = c.out.b[:0]
	return err
}

// fail ends the connection and every call on it with err; m.mu is held.
func (c *muConn) fail(m *rawMux, err error) {
	if c.err != nil {
		return
	}
	c.err = err
	c.conn.Close()
	for id, cl := range c.pending {
		delete(c.pending, id)
		cl.done <- err
	}
	m.window.Broadcast()
}

// end hands stream id's end to its caller, if it is still waiting.
func (c *muConn) end(m *rawMux, id uint32, err error) {
	m.mu.Lock()
	if cl, ok := c.pending[id]; ok {
		delete(c.pending, id)
		cl.done <- err
	}
	m.mu.Unlock()
}

// lookup is stream id's call, nil when none waits for it.
func (c *muConn) lookup(m *rawMux, id uint32) *muCall {
	m.mu.Lock()
	cl := c.pending[id]
	m.mu.Unlock()
	return cl
}

// read reads the connection's frames until it fails, handing each
// stream's headers, message and trailers to its call.
func (c *muConn) read(m *rawMux) {
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.handle(m, f)
		}
		if err != nil {
			m.mu.Lock()
			c.fail(m, err)
			m.mu.Unlock()
			return
		}
	}
}

func (c *muConn) handle(m *rawMux, f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		c.recvUnacked += int64(f.Length)
		if c.recvUnacked >= recvConnWindow/2 {
			m.mu.Lock()
			err := c.fr.WriteWindowUpdate(0, uint32(c.recvUnacked))
			if err == nil {
				err = c.flush()
			}
			m.mu.Unlock()
			if err != nil {
				return err
			}
			c.recvUnacked = 0
		}
		cl := c.lookup(m, f.StreamID)
		if cl == nil {
			return nil // a call that timed out
		}
		switch {
		case cl.h.blocks != 1:
			c.end(m, f.StreamID, &malformedGRPCError{"DATA outside the answer's headers and trailers"})
		case len(cl.resp)+len(f.Data()) > recvStreamWindow:
			c.end(m, f.StreamID, &malformedGRPCError{"answer over the stream window"})
		case f.StreamEnded():
			c.end(m, f.StreamID, &malformedGRPCError{"stream ended without trailers"})
		default:
			cl.resp = append(cl.resp, f.Data()...)
		}
	case *http2.HeadersFrame:
		c.cur = c.lookup(m, f.StreamID)
		if err := c.readBlock(f); err != nil {
			return err // the connection's header table can no longer be trusted
		}
		cl := c.cur
		c.cur = nil
		switch {
		case cl == nil:
		case f.StreamEnded():
			c.end(m, f.StreamID, nil)
		case cl.h.blocks > 1:
			c.end(m, f.StreamID, &malformedGRPCError{"trailers without END_STREAM"})
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		err := c.applySettings(f, m.t)
		if err == nil {
			err = c.fr.WriteSettingsAck()
		}
		if err == nil {
			err = c.flush()
		}
		return err
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		err := c.fr.WritePing(true, f.Data)
		if err == nil {
			err = c.flush()
		}
		return err
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			m.mu.Lock()
			c.sendConn += int64(f.Increment)
			m.window.Broadcast()
			m.mu.Unlock()
		}
	case *http2.RSTStreamFrame:
		if f.ErrCode == http2.ErrCodeRefusedStream {
			c.end(m, f.StreamID, errUnprocessed)
		} else {
			c.end(m, f.StreamID, errors.New("stream reset by the server: "+f.ErrCode.String()))
		}
	case *http2.GoAwayFrame:
		m.mu.Lock()
		c.goaway = true
		for id, cl := range c.pending {
			if id > f.LastStreamID {
				delete(c.pending, id)
				cl.done <- errUnprocessed
			}
		}
		m.mu.Unlock()
	default:
		return unexpectedFrame(f)
	}
	return nil
}

// readBlock decodes a header block (f's fragment and its CONTINUATION
// frames) into the current call's answerHead (none: decoded all the same,
// to keep the header table in step).
func (c *muConn) readBlock(f *http2.HeadersFrame) error {
	if c.cur != nil {
		c.cur.h.blocks++
	}
	var err error
	c.block, err = decodeHeaderBlock(c.fr, f, c.block, c.dec)
	return err
}

func (c *muConn) emit(f hpack.HeaderField) {
	if c.cur != nil {
		c.cur.h.emit(f)
	}
}
