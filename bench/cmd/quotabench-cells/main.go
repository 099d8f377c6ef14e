// Command quotabench-cells fills new cells from outside for make
// bench-cells (bench/cells.sh): identities from..to-1, user u<i> of app
// a<i % apps> (bench/monthly.sh's), in POST /v1/check/batch bodies of
// -batch checks, sent on -c connections at once. Every check must be
// allowed (a new identity, 1 of its limit used): a refused or denied batch
// fails the run. It prints one line:
//
//	batches=<n> seconds=<s> batches_per_s=<r>
//
//	go run ./bench/cmd/quotabench-cells -url http://127.0.0.1:18096 -from 0 -to 100000
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18096", "quotad's HTTP address")
	from := flag.Int("from", 0, "first identity")
	to := flag.Int("to", 100_000, "identities up to this one (excluded)")
	apps := flag.Int("apps", 97, "apps the identities belong to")
	batch := flag.Int("batch", 500, "checks a batch")
	conc := flag.Int("c", 4, "batches in flight")
	inspectAddr := flag.String("inspect", "", "print where this Redis' bytes are, and send nothing")
	flag.Parse()
	if *inspectAddr != "" {
		if err := inspect(*inspectAddr); err != nil {
			fmt.Fprintln(os.Stderr, "quotabench-cells:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*url, *from, *to, *apps, *batch, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "quotabench-cells:", err)
		os.Exit(1)
	}
}

func body(from, to, apps int) []byte {
	b := []byte(`{"checks":[`)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = append(b, `{"app_id":"a`...)
		b = strconv.AppendInt(b, int64(i%apps), 10)
		b = append(b, `","user_id":"u`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `"}`...)
	}
	return append(b, "]}"...)
}

func run(url string, from, to, apps, batch, conc int) error {
	var bodies [][]byte
	for b := from; b < to; b += batch {
		bodies = append(bodies, body(b, min(b+batch, to), apps))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}, Timeout: time.Minute}
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				if err := send(client, url, bodies[i]); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return firstErr
	}
	fmt.Printf("batches=%d seconds=%.3f batches_per_s=%.1f\n", len(bodies), secs, float64(len(bodies))/secs)
	return nil
}

func send(client *http.Client, url string, b []byte) error {
	resp, err := client.Post(url+"/v1/check/batch", "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, raw)
	}
	var r struct {
		Results []struct {
			Allowed bool `json:"allowed"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("reply: %v: %.200s", err, raw)
	}
	for _, x := range r.Results {
		if !x.Allowed {
			return fmt.Errorf("a new identity was denied: %.300s", raw)
		}
	}
	return nil
}
