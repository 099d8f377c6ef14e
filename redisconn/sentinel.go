package redisconn

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// sentinelMaster asks the sentinel at addr for the address of master.
func sentinelMaster(ctx context.Context, dial func(context.Context, string) (net.Conn, error), addr, master, password string) (string, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return "", err // names addr
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	r := bufio.NewReaderSize(c, 512)
	if password != "" {
		if _, err := c.Write(resp("AUTH", password)); err != nil {
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return "", fmt.Errorf("sentinel %s: AUTH: %q %v", addr, strings.TrimSpace(line), err)
		}
	}
	if _, err := c.Write(resp("SENTINEL", "get-master-addr-by-name", master)); err != nil {
		return "", fmt.Errorf("sentinel %s: %w", addr, err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", addr, err)
	}
	if !strings.HasPrefix(line, "*2") {
		return "", fmt.Errorf("sentinel %s: no master %q: %s", addr, master, strings.TrimSpace(line))
	}
	var parts [2]string
	for i := range parts {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		v, err := r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		parts[i] = strings.TrimSpace(v)
	}
	return net.JoinHostPort(parts[0], parts[1]), nil
}

// resp encodes a command in the Redis protocol.
func resp(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}
