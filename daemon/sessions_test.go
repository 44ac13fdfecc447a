package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/control"
)

// waitNoSessions waits (a minute at most) until the daemon holds no lease
// session and no lease.
func waitNoSessions(t *testing.T, d *Daemon, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		s, l := d.sessions.counts()
		if s == 0 && l == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d sessions with %d leases a minute after the client closed", what, s, l)
		}
	}
}

// TestSessionEndsWithClient: a lease session ends, its leases released,
// when its client goes away, whatever body its request carried (clients
// send none, but HTTP allows one; net/http notices a client going away
// only once the body was read, so the daemon reads it first), and a
// client that goes away before its body is all sent leaves none.
func TestSessionEndsWithClient(t *testing.T) {
	emu := startEmulator(t, dataset("bkt", "d/", 1, 10_000))
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	hc := unixClient(t, d)
	post := func(length int, body string) net.Conn {
		conn, err := net.Dial("unix", d.Config().Control.Socket)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n%s", length, body)
		return conn
	}
	for _, body := range []string{"", "{}", strings.Repeat(" ", 2<<10)} {
		conn := post(len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		var ev control.SessionEvent
		if err != nil || json.Unmarshal(line, &ev) != nil || ev.Session == "" {
			t.Fatalf("body of %d bytes: first line %q: %v", len(body), line, err)
		}
		lease, err := hc.Post("http://x/v1/sessions/"+url.PathEscape(ev.Session)+"/leases", "application/json",
			strings.NewReader(`{"bucket":"bkt","name":"d/00"}`))
		if err != nil || lease.StatusCode != http.StatusOK {
			t.Fatalf("acquire: %v %v", lease, err)
		}
		lease.Body.Close()
		conn.Close() // the client goes away
		waitNoSessions(t, d, fmt.Sprintf("body of %d bytes", len(body)))
	}
	conn := post(1<<20, "{") // a MiB announced, one byte sent
	time.Sleep(100 * time.Millisecond)
	conn.Close()
	waitNoSessions(t, d, "a body cut short")
}
