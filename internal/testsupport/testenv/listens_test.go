package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// Listens tells the process that holds a listening socket from one that
// does not, which is how a harness knows the server answering on a port
// is the one it started.
func TestListens_TellsTheProcessThatHoldsThePort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	tests := []struct {
		name string
		pid  int
		addr string
		want bool
	}{
		{"the holder", os.Getpid(), addr, true},
		{"another process", other.Process.Pid, addr, false},
		{"a port nobody listens on", os.Getpid(), "127.0.0.1:1", false},
		{"not an IPv4 address", os.Getpid(), "localhost:80", false},
	}
	for _, tt := range tests {
		if got := Listens(tt.pid, tt.addr); got != tt.want {
			t.Errorf("%s: Listens(%d, %s) = %v, want %v", tt.name, tt.pid, tt.addr, got, tt.want)
		}
	}
}
