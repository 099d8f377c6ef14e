package testenv

import (
	"net"
	"net/http"
	"testing"
)

// A quotad whose free port another process took before its first start
// moves to another free port and starts there, rather than failing the
// test that started it.
func TestStartQuotad_MovesOffAPortTakenBeforeItsFirstStart(t *testing.T) {
	t.Parallel()
	_, dsn := MySQL(t)
	_, prefix := Redis(t)
	q := NewQuotad(t, "QUOTA_MYSQL_SHARDS="+dsn, "QUOTA_REDIS_KEY_PREFIX="+prefix)
	taken := q.Addr
	ln, err := net.Listen("tcp", taken)
	if err != nil {
		t.Fatalf("take %s: %v", taken, err)
	}
	defer ln.Close()
	q.Start()
	if q.Addr == taken {
		t.Fatalf("quotad still on the taken port %s", taken)
	}
	resp, err := http.Get(q.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !Listens(q.PID(), q.Addr) {
		t.Fatalf("quotad on %s: %d, listening %v", q.Addr, resp.StatusCode, Listens(q.PID(), q.Addr))
	}
}
