package main

// The flood mode: single-message REST publishes to lakepubsub, either closed
// loop (-rate 0: -publishers workers, each sends its next request when the last
// is answered, for -duration) to find the server's capacity, or open loop (-rate
// R: a request every 1/R s whatever the server answers, each on a goroutine of
// its own, over at most -connections connections, as a fleet of clients with
// connection pools would send) to push it past capacity. A request's latency
// counts from its due time, so time spent waiting for a connection counts too. Every
// answer is counted by HTTP status, every failed request by kind (a reset
// connection, a refused one, a timeout); latencies are those of accepted (200)
// publishes. Refusals and transport failures are outcomes here, not errors.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// floodRequestTimeout bounds one request: a server that stops answering shows
// as timeouts instead of a hung run.
const floodRequestTimeout = 30 * time.Second

type floodTally struct {
	mu        sync.Mutex
	statuses  map[string]int
	transport map[string]int
	latencies []float64
}

func (t *floodTally) answer(status int, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.statuses[strconv.Itoa(status)]++
	if status == http.StatusOK {
		t.latencies = append(t.latencies, ms(took))
	}
}

func (t *floodTally) failure(err error) {
	kind := "other"
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		kind = "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		kind = "refused"
	case errors.Is(err, syscall.EPIPE):
		kind = "broken_pipe"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		kind = "closed_without_answer"
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			kind = "timeout"
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.transport[kind]++
}

func floodBodies(first, n int) [][]byte {
	out := make([][]byte, n)
	for k := range n {
		msg := map[string]any{"messages": []map[string]string{
			{"data": base64.StdEncoding.EncodeToString(payload(first + k))},
		}}
		body, err := json.Marshal(msg)
		if err != nil {
			panic(err)
		}
		out[k] = body
	}
	return out
}

func runFlood(ctx context.Context, r *run) error {
	o := r.o
	if o.url == "" || o.topic == "" {
		return fmt.Errorf("flood needs -url and -topic")
	}
	url := fmt.Sprintf("%s/v1/%s:publish", o.url, topicName(o))
	transport := &http.Transport{
		MaxIdleConns: 0, MaxIdleConnsPerHost: o.connections, MaxConnsPerHost: o.connections,
		IdleConnTimeout: 60 * time.Second,
	}
	client := &http.Client{Transport: transport, Timeout: floodRequestTimeout}
	defer transport.CloseIdleConnections()
	bodies := floodBodies(o.firstIndex, min(o.messages, 1000))
	tally := &floodTally{statuses: map[string]int{}, transport: map[string]int{}}
	send := func(i int) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			tally.failure(err)
			return
		}
		req.Header.Set("content-type", "application/json")
		started := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			tally.failure(err)
			return
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			tally.failure(err)
			return
		}
		tally.answer(resp.StatusCode, time.Since(started))
	}
	c := ready(o)
	var wg sync.WaitGroup
	if o.rate <= 0 { // closed loop: capacity
		deadline := c.start.Add(o.duration)
		var next sync.Mutex
		sent := 0
		for range o.publishers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					next.Lock()
					i := sent
					sent++
					next.Unlock()
					send(i)
				}
			}()
		}
	} else { // open loop: a request every 1/rate s, answered or not
		interval := float64(time.Second) / o.rate
		for i := range o.messages {
			due := c.start.Add(time.Duration(float64(i) * interval))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(i)
			}()
		}
		r.mu.Lock()
		r.res.PublishS = time.Since(c.start).Seconds()
		r.mu.Unlock()
	}
	wg.Wait()
	c.stop(r, time.Now())
	tally.mu.Lock()
	defer tally.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Published = tally.statuses["200"]
	r.res.LatenciesMs = tally.latencies
	r.res.Statuses = tally.statuses
	r.res.TransportErrors = tally.transport
	return nil
}
