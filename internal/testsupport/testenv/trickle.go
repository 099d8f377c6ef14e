package testenv

import (
	"io"
	"net"
	"time"
)

// Trickle writes s to conn every interval until stop is closed or a write
// fails: a client sending its request as slowly as it dares.
func Trickle(conn net.Conn, s string, every time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := io.WriteString(conn, s); err != nil {
				return
			}
		}
	}
}
