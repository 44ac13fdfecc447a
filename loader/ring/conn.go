package ring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Network is the data socket's network: SOCK_SEQPACKET, so that every
// message is one packet, delivered whole and in order.
const Network = "unixpacket"

// Conn is one end of a data-socket connection: it sends and receives
// whole messages, and the ring's memfd with SCM_RIGHTS. One goroutine may
// send while another receives; Close unblocks both.
type Conn struct {
	c *net.UnixConn
}

// NewConn wraps a data-socket connection.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// Send sends message m (see Append).
func (c *Conn) Send(m any) error {
	if _, err := c.c.Write(Append(nil, m)); err != nil {
		return fmt.Errorf("ring: send %T: %w", m, err)
	}
	return nil
}

// SendFd sends message m with fd in its ancillary data (SCM_RIGHTS).
func (c *Conn) SendFd(m any, fd int) error {
	b := Append(nil, m)
	n, oobn, err := c.c.WriteMsgUnix(b, unix.UnixRights(fd), nil)
	if err == nil && (n != len(b) || oobn == 0) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("ring: send %T with a descriptor: %w", m, err)
	}
	return nil
}

// Recv receives one message; descriptors that come with it are closed.
// The peer closing the connection is io.EOF; a malformed message wraps
// ErrMessage.
func (c *Conn) Recv() (any, error) {
	m, fds, err := c.recv()
	for _, fd := range fds {
		unix.Close(fd)
	}
	return m, err
}

// RecvFd receives one message and the one descriptor that must come with
// it (the caller's to close).
func (c *Conn) RecvFd() (any, int, error) {
	m, fds, err := c.recv()
	if err == nil && len(fds) != 1 {
		err = fmt.Errorf("%w: %T came with %d descriptors; want 1", ErrMessage, m, len(fds))
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, -1, err
	}
	return m, fds[0], nil
}

// recv reads one packet and the descriptors it carries.
func (c *Conn) recv() (any, []int, error) {
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	fds := parseRights(oob[:oobn])
	switch {
	case err != nil:
		return nil, fds, fmt.Errorf("ring: receive: %w", err)
	case n == 0:
		return nil, fds, io.EOF
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		return nil, fds, fmt.Errorf("%w: truncated (flags %#x)", ErrMessage, flags)
	}
	m, err := DecodeMessage(buf[:n])
	return m, fds, err
}

// parseRights returns the descriptors of SCM_RIGHTS messages in oob.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// SetDeadline bounds the next sends and receives (zero: none).
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Client is a data-socket client of a loader session: it joins the
// session, maps its ring and exchanges messages. Recv must be called from
// one goroutine at a time; Send may be called concurrently with it.
type Client struct {
	conn    *Conn
	m       *Mapping
	welcome Welcome
}

// Dial connects to the data socket at path, joins session with token
// (from the session's first line) and maps the ring the daemon sends.
func Dial(ctx context.Context, path, session, token string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, Network, path)
	if err != nil {
		return nil, fmt.Errorf("ring: dial %s: %w", path, err)
	}
	conn := NewConn(nc.(*net.UnixConn))
	c, err := join(ctx, conn, session, token)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// join says hello and maps the ring.
func join(ctx context.Context, conn *Conn, session, token string) (*Client, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := conn.Send(Hello{Protocol: Protocol, Session: session, Token: token}); err != nil {
		return nil, err
	}
	m, fds, err := conn.recv()
	if err == nil && len(fds) != 1 {
		if e, ok := m.(*Error); ok {
			err = e
		} else {
			err = fmt.Errorf("%w: %T came with %d descriptors; want 1", ErrMessage, m, len(fds))
		}
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.Join(ctx.Err(), err)
	}
	fd := fds[0]
	defer unix.Close(fd)
	w, ok := m.(Welcome)
	if !ok {
		return nil, fmt.Errorf("%w: %T instead of Welcome", ErrMessage, m)
	}
	if w.Protocol != Protocol {
		return nil, fmt.Errorf("%w: protocol %d; this client speaks %d", ErrMessage, w.Protocol, Protocol)
	}
	mp, err := Map(fd, w.RingBytes, w.SlotBytes)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, m: mp, welcome: w}, nil
}

// Welcome returns the daemon's answer to Hello.
func (c *Client) Welcome() Welcome { return c.welcome }

// Slot returns slot i of the ring, nil if there is none.
func (c *Client) Slot(i int) []byte { return c.m.Slot(i) }

// Batch decodes the slot a Ready names.
func (c *Client) Batch(r Ready) (Header, []Desc, error) {
	s := c.m.Slot(int(r.Slot))
	if s == nil {
		return Header{}, nil, fmt.Errorf("%w: slot %d", ErrLayout, r.Slot)
	}
	return Decode(s, int(c.welcome.Arrays))
}

// Recv receives the next message from the daemon (Ready, EpochEnd, End,
// StateIs or *Error), or ctx's error. The daemon closing the connection is
// io.EOF.
func (c *Client) Recv(ctx context.Context) (any, error) {
	stop := context.AfterFunc(ctx, func() { c.conn.c.SetReadDeadline(time.Now()) })
	m, err := c.conn.Recv()
	if !stop() {
		c.conn.c.SetReadDeadline(time.Time{})
		if err != nil {
			err = errors.Join(ctx.Err(), err)
		}
	}
	return m, err
}

// Send sends a message to the daemon: Release, StateRequest or Seek.
func (c *Client) Send(m any) error { return c.conn.Send(m) }

// Release gives a Ready's slot back.
func (c *Client) Release(r Ready) error { return c.conn.Send(Release{Slot: r.Slot, Seq: r.Seq}) }

// Close leaves the session (the daemon ends it) and unmaps the ring.
func (c *Client) Close() error {
	return errors.Join(c.conn.Close(), c.m.Unmap())
}
