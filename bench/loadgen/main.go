// Command loadgen is the side-by-side benchmark's Go load generator. It drives
// lakepubsub through Google's Pub/Sub Go client (cloud.google.com/go/pubsub/v2,
// over gRPC; the client finds the server through PUBSUB_EMULATOR_HOST) and NATS
// JetStream through the NATS Go client (nats.go), the same way on both sides.
// bench/grpc_bench.py builds it (bench/gobuild.py) and runs it.
//
//	loadgen -system pubsub|nats -mode publish|drain|latency [flags]
//
// Modes:
//
//   - publish: -publishers P, each with a client (connection) of its own,
//     publish -messages M between them, 1 KiB each. By default every
//     publisher hands all its messages to the client at once and waits for
//     every result: Pub/Sub with the client's default batching (bundles of 100
//     messages or 10 ms, many requests in flight), NATS with PublishAsync and
//     its default window of pending acks. With -single a publisher publishes
//     one message and waits for its result before the next (Pub/Sub bundling
//     off, CountThreshold 1; NATS Publish), and each round trip is reported.
//   - drain: receive -messages distinct messages from a backlog and ack each
//     (Pub/Sub: Subscriber.Receive, StreamingPull; NATS: a push consumer that
//     this program creates). -max-outstanding bounds the unacked messages
//     (Pub/Sub ReceiveSettings.MaxOutstandingMessages; JetStream MaxAckPending).
//   - flood (-system rest): single-message REST publishes, closed loop (-rate
//     0, -publishers workers for -duration) or open loop at -rate, counting
//     answers by status and failed requests by kind (flood.go).
//   - latency: one publisher sends -messages messages at -rate per second,
//     stamping its send time (attribute / header bench-sent-ns, this
//     process's clock), while a receiver (as in drain) records receive time
//     minus send time.
//   - s3publish, s3subscribe: the S3 bench's open-loop load over many topics
//     (-topic and -subscription take comma lists; s3load.go).
//
// Protocol with the driver: after connecting and building its payloads the
// program prints {"ready":true} on stdout and, with -wait, waits for one line
// on stdin; the timed part starts when it arrives. At the end it prints one
// JSON line (result) and exits 0, or 1 if anything failed.
package main

import (
	"bufio"
	"context"
	"crypto/sha3"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/nats-io/nats.go"
)

// messageBytes and payloadSeed match bench/workload.py's payload(i).
const (
	messageBytes = 1024
	payloadSeed  = "lakepubsub-bench-v1"
	sentAttr     = "bench-sent-ns"
	// maxErrors keeps the report short when every message fails the same way.
	maxErrors     = 20
	maxErrorChars = 400
	// closeGrace: how long shutdown may take past the deadline before the run counts as hung.
	closeGrace = 15 * time.Second
	// latency: the receiver's stream or subscription opens before the first message is sent.
	receiverSettle = time.Second
)

type options struct {
	system, mode                 string
	project, topic, subscription string
	natsURL, stream, subject     string
	consumer                     string
	publishers, messages         int
	firstIndex                   int
	single                       bool
	maxOutstanding, streams      int
	ackWait                      time.Duration
	rate                         float64
	timeout                      time.Duration
	wait                         bool
	url                          string
	duration                     time.Duration
	connections                  int
}

func parseOptions() options {
	var o options
	var ackWaitS, timeoutS float64
	flag.StringVar(&o.system, "system", "pubsub", "pubsub, nats or rest (lakepubsub's REST door)")
	flag.StringVar(&o.mode, "mode", "", "publish, drain or latency; flood (system rest); s3publish, s3subscribe")
	flag.StringVar(&o.project, "project", "bench", "Pub/Sub project")
	flag.StringVar(&o.topic, "topic", "", "Pub/Sub topic (id or projects/p/topics/t)")
	flag.StringVar(&o.subscription, "subscription", "", "Pub/Sub subscription (id or full name)")
	flag.StringVar(&o.natsURL, "nats-url", "", "NATS server URL")
	flag.StringVar(&o.stream, "stream", "BENCH", "JetStream stream")
	flag.StringVar(&o.subject, "subject", "bench.messages", "NATS subject the stream stores")
	flag.StringVar(&o.consumer, "consumer", "bench-push", "durable push consumer to create (drain, latency)")
	flag.IntVar(&o.publishers, "publishers", 1, "publishers (publish)")
	flag.IntVar(&o.messages, "messages", 0, "messages to publish / receive, all publishers together")
	flag.IntVar(&o.firstIndex, "first-index", 0, "payload index of the first message")
	flag.BoolVar(&o.single, "single", false, "publish one message at a time, waiting for each result")
	flag.IntVar(&o.maxOutstanding, "max-outstanding", 1000, "unacked messages the receiver allows")
	flag.IntVar(&o.streams, "streams", 1, "Pub/Sub StreamingPull streams (ReceiveSettings.NumGoroutines)")
	flag.Float64Var(&ackWaitS, "ack-wait", 10, "JetStream consumer ack wait, seconds")
	flag.Float64Var(&o.rate, "rate", 200, "messages per second (latency)")
	flag.Float64Var(&timeoutS, "timeout", 900, "deadline of the timed part, seconds")
	flag.BoolVar(&o.wait, "wait", false, "wait for a line on stdin before the timed part")
	flag.StringVar(&o.url, "url", "", "lakepubsub REST base URL (system rest)")
	flag.IntVar(&o.connections, "connections", 256, "connections at most (flood)")
	var durationS float64
	flag.Float64Var(&durationS, "duration", 10, "seconds of closed-loop publishing (flood, -rate 0)")
	flag.Parse()
	o.duration = time.Duration(durationS * float64(time.Second))
	o.ackWait = time.Duration(ackWaitS * float64(time.Second))
	o.timeout = time.Duration(timeoutS * float64(time.Second))
	return o
}

// result is the JSON line the program prints.
type result struct {
	System string `json:"system"`
	Mode   string `json:"mode"`
	// Publishes the server confirmed.
	Published int `json:"published"`
	// Deliveries (redeliveries included), distinct messages among them, and acks sent.
	Received    int `json:"received"`
	Distinct    int `json:"distinct"`
	Redelivered int `json:"redelivered"`
	Acked       int `json:"acked"`
	// The timed part: from the start signal to the last publish result (publish),
	// the last ack sent and flushed (drain), or the last message received (latency).
	ElapsedS float64 `json:"elapsed_s"`
	// Publishing time in latency mode: start to the last message handed to the client.
	PublishS float64 `json:"publish_s"`
	// User + system CPU seconds of this process over the timed part.
	CPUS float64 `json:"cpu_s"`
	// Milliseconds: each publish round trip (-single), or publish to receive (latency).
	LatenciesMs []float64 `json:"latencies_ms"`
	Errors      []string  `json:"errors"`
	// Flood mode: answers by HTTP status, and requests that got none by failure kind.
	Statuses        map[string]int `json:"statuses,omitempty"`
	TransportErrors map[string]int `json:"transport_errors,omitempty"`
}

// run holds what the goroutines of one run share.
type run struct {
	o   options
	mu  sync.Mutex
	res result
}

func (r *run) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.res.Errors) >= maxErrors {
		return
	}
	s := fmt.Sprintf(format, args...)
	if len(s) > maxErrorChars {
		s = s[:maxErrorChars]
	}
	r.res.Errors = append(r.res.Errors, s)
}

// received records a drain's counts, and a failure if it timed out short of them.
func (r *run) received(s *seen, redelivered, acked *atomic.Int64, timedOut bool) {
	received, distinct := s.counts()
	r.mu.Lock()
	r.res.Received, r.res.Distinct = received, distinct
	r.res.Redelivered, r.res.Acked = int(redelivered.Load()), int(acked.Load())
	r.mu.Unlock()
	if timedOut {
		r.fail("timeout after %s: %d of %d distinct", r.o.timeout, distinct, r.o.messages)
	}
}

func (r *run) report() {
	r.mu.Lock()
	defer r.mu.Unlock()
	line, err := json.Marshal(&r.res)
	if err != nil {
		line = fmt.Appendf(nil, `{"errors":[%q]}`, err.Error())
	}
	fmt.Println(string(line))
	if len(r.res.Errors) > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

// payload is message i's body, the same bytes as bench/workload.py's payload(i).
func payload(i int) []byte {
	in := make([]byte, len(payloadSeed)+8)
	copy(in, payloadSeed)
	binary.BigEndian.PutUint64(in[len(payloadSeed):], uint64(int64(i)))
	return sha3.SumSHAKE128(in, messageBytes)
}

// payloads builds messages [first, first+n) before the timed part starts.
func payloads(first, n int) [][]byte {
	out := make([][]byte, n)
	for k := range n {
		out[k] = payload(first + k)
	}
	return out
}

// split shares n messages between p publishers; publisher k starts at offsets[k].
func split(n, p int) (counts, offsets []int) {
	counts, offsets = make([]int, p), make([]int, p)
	at := 0
	for k := range p {
		counts[k] = n / p
		if k < n%p {
			counts[k]++
		}
		offsets[k] = at
		at += counts[k]
	}
	return counts, offsets
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// clock is the start of the timed part.
type clock struct {
	start time.Time
	cpu   float64
}

// ready tells the driver that setup is done and waits for the start signal.
func ready(o options) clock {
	fmt.Println(`{"ready":true}`)
	if o.wait {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && line == "" {
			fmt.Fprintln(os.Stderr, "loadgen: no start signal on stdin:", err)
			os.Exit(2)
		}
	}
	return clock{start: time.Now(), cpu: cpuSeconds()}
}

func (c clock) stop(r *run, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.ElapsedS = end.Sub(c.start).Seconds()
	r.res.CPUS = cpuSeconds() - c.cpu
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// seen counts distinct messages by id; safe for concurrent use.
type seen struct {
	mu       sync.Mutex
	ids      map[string]struct{}
	want     int
	done     chan struct{}
	received int
}

func newSeen(want int) *seen {
	return &seen{ids: make(map[string]struct{}, want), want: want, done: make(chan struct{})}
}

// add records one delivery; it reports whether it was the message's first.
func (s *seen) add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received++
	if _, dup := s.ids[id]; dup {
		return false
	}
	s.ids[id] = struct{}{}
	if len(s.ids) == s.want {
		close(s.done)
	}
	return true
}

func (s *seen) counts() (received, distinct int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received, len(s.ids)
}

func main() {
	o := parseOptions()
	r := &run{o: o, res: result{System: o.system, Mode: o.mode, LatenciesMs: []float64{}, Errors: []string{}}}
	if o.messages <= 0 {
		r.fail("-messages must be positive")
		r.report()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The timed part has its deadline; this one catches a setup or shutdown that hangs.
	time.AfterFunc(o.timeout+2*closeGrace+time.Minute, func() {
		r.fail("hung: the run did not end %s past its deadline", 2*closeGrace+time.Minute)
		r.report()
	})
	if o.mode == "s3publish" || o.mode == "s3subscribe" {
		runS3(ctx, o) // s3load.go
	}
	var err error
	switch o.system {
	case "pubsub":
		err = runPubsub(ctx, r)
	case "nats":
		err = runNats(ctx, r)
	case "rest":
		if o.mode != "flood" {
			err = fmt.Errorf("system rest has one mode, flood")
			break
		}
		err = runFlood(ctx, r)
	default:
		err = fmt.Errorf("unknown -system %q", o.system)
	}
	if err != nil {
		r.fail("%s", err)
	}
	r.report()
}

// --- Pub/Sub (Google's Go client over gRPC) -----------------------------------

func topicName(o options) string {
	if len(o.topic) > 9 && o.topic[:9] == "projects/" {
		return o.topic
	}
	return fmt.Sprintf("projects/%s/topics/%s", o.project, o.topic)
}

func subscriptionName(o options) string {
	if len(o.subscription) > 9 && o.subscription[:9] == "projects/" {
		return o.subscription
	}
	return fmt.Sprintf("projects/%s/subscriptions/%s", o.project, o.subscription)
}

func runPubsub(ctx context.Context, r *run) error {
	if os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		return errors.New("PUBSUB_EMULATOR_HOST is not set")
	}
	switch r.o.mode {
	case "publish":
		return pubsubPublish(ctx, r)
	case "drain", "latency":
		client, err := pubsub.NewClient(ctx, r.o.project)
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		defer client.Close()
		if r.o.mode == "drain" {
			return pubsubDrain(ctx, r, client)
		}
		return pubsubLatency(ctx, r, client)
	}
	return fmt.Errorf("unknown -mode %q", r.o.mode)
}

func pubsubPublish(ctx context.Context, r *run) error {
	o := r.o
	counts, offsets := split(o.messages, o.publishers)
	clients := make([]*pubsub.Client, o.publishers)
	publishers := make([]*pubsub.Publisher, o.publishers)
	bodies := make([][][]byte, o.publishers)
	for k := range o.publishers {
		client, err := pubsub.NewClient(ctx, o.project)
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		defer client.Close()
		clients[k] = client
		publishers[k] = client.Publisher(topicName(o))
		if o.single {
			publishers[k].PublishSettings.CountThreshold = 1
		}
		bodies[k] = payloads(o.firstIndex+offsets[k], counts[k])
	}
	// Connect before the start: one untimed warm-up message per publisher
	// (payload -1-k), which the driver counts in.
	for k, p := range publishers {
		if _, err := p.Publish(ctx, &pubsub.Message{Data: payload(-1 - k)}).Get(ctx); err != nil {
			return fmt.Errorf("warm-up publish: %w", err)
		}
	}
	publishAll(ctx, r, bodies, func(ctx context.Context, k int, body []byte) error {
		_, err := publishers[k].Publish(ctx, &pubsub.Message{Data: body}).Get(ctx)
		return err
	}, func(ctx context.Context, k int, published *atomic.Int64) {
		results := make([]*pubsub.PublishResult, len(bodies[k]))
		for i, body := range bodies[k] {
			results[i] = publishers[k].Publish(ctx, &pubsub.Message{Data: body})
		}
		for _, res := range results {
			if _, err := res.Get(ctx); err != nil {
				r.fail("publish: %s", err)
				continue
			}
			published.Add(1)
		}
	})
	for _, p := range publishers {
		p.Stop()
	}
	return nil
}

// publishAll publishes every publisher's bodies from a goroutine of its own, all
// started together: with -single one at a time, each round trip timed, else with
// batch (which counts what was confirmed); then records the counts.
func publishAll(ctx context.Context, r *run, bodies [][][]byte,
	single func(ctx context.Context, k int, body []byte) error,
	batch func(ctx context.Context, k int, published *atomic.Int64)) {
	o := r.o
	tctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c := ready(o)
	var wg sync.WaitGroup
	var published atomic.Int64
	latencies := make([][]float64, len(bodies))
	for k := range bodies {
		wg.Go(func() {
			if !o.single {
				batch(tctx, k, &published)
				return
			}
			for _, body := range bodies[k] {
				sent := time.Now()
				if err := single(tctx, k, body); err != nil {
					r.fail("publish: %s", err)
					return
				}
				latencies[k] = append(latencies[k], ms(time.Since(sent)))
				published.Add(1)
			}
		})
	}
	wg.Wait()
	c.stop(r, time.Now())
	r.mu.Lock()
	r.res.Published = int(published.Load())
	for _, l := range latencies {
		r.res.LatenciesMs = append(r.res.LatenciesMs, l...)
	}
	r.mu.Unlock()
	if tctx.Err() != nil {
		r.fail("timeout after %s: %d of %d published", o.timeout, published.Load(), o.messages)
	}
}

func pubsubSubscriber(client *pubsub.Client, o options) *pubsub.Subscriber {
	sub := client.Subscriber(subscriptionName(o))
	sub.ReceiveSettings.MaxOutstandingMessages = o.maxOutstanding
	sub.ReceiveSettings.NumGoroutines = o.streams
	return sub
}

func pubsubDrain(ctx context.Context, r *run, client *pubsub.Client) error {
	o := r.o
	sub := pubsubSubscriber(client, o)
	s := newSeen(o.messages)
	var acked, redelivered atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := ready(o)
	deadline := time.AfterFunc(o.timeout, cancel)
	go func() {
		<-s.done
		cancel()
	}()
	err := sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		if len(m.Data) != messageBytes {
			r.fail("message %s: %d bytes", m.ID, len(m.Data))
		}
		if !s.add(m.ID) {
			redelivered.Add(1)
		}
		m.Ack()
		acked.Add(1)
	})
	// Receive returns once every callback returned and the acks are sent.
	end := time.Now()
	timedOut := !deadline.Stop()
	c.stop(r, end)
	if err != nil {
		r.fail("receive: %s", err)
	}
	r.received(s, &redelivered, &acked, timedOut)
	return nil
}

func pubsubLatency(ctx context.Context, r *run, client *pubsub.Client) error {
	o := r.o
	publisher := client.Publisher(topicName(o))
	publisher.PublishSettings.CountThreshold = 1
	defer publisher.Stop()
	sub := pubsubSubscriber(client, o)
	s := newSeen(o.messages)
	var mu sync.Mutex
	latencies := make([]float64, 0, o.messages)
	var acked, redelivered atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	receiving := make(chan error, 1)
	go func() {
		receiving <- sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			now := time.Now().UnixNano()
			sent, perr := strconv.ParseInt(m.Attributes[sentAttr], 10, 64)
			first := s.add(m.ID)
			m.Ack()
			acked.Add(1)
			switch {
			case perr != nil:
				r.fail("message %s: attribute %s=%q", m.ID, sentAttr, m.Attributes[sentAttr])
			case first:
				mu.Lock()
				latencies = append(latencies, ms(time.Duration(now-sent)))
				mu.Unlock()
			default:
				redelivered.Add(1)
			}
		})
	}()
	bodies := payloads(o.firstIndex, o.messages)
	time.Sleep(receiverSettle)
	c := ready(o)
	publishEnd, errs := pace(o, c.start, func(i int, sentNs int64) publishWait {
		res := publisher.Publish(ctx, &pubsub.Message{
			Data:       bodies[i],
			Attributes: map[string]string{sentAttr: strconv.FormatInt(sentNs, 10)},
		})
		return func() error { _, err := res.Get(ctx); return err }
	})
	stop := func() error {
		cancel()
		if err := <-receiving; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	return finishLatency(r, c, s, publishEnd, errs, stop, func() {
		mu.Lock()
		defer mu.Unlock()
		r.res.LatenciesMs = append(r.res.LatenciesMs, latencies...)
		r.res.Acked, r.res.Redelivered = int(acked.Load()), int(redelivered.Load())
	})
}

// publishWait waits for one publish's result.
type publishWait func() error

// pace publishes message i at start + i/rate; publish stamps the send time it is given.
// It returns when the last message is handed to the client, with a channel that
// yields each failed result and closes once every result is in.
func pace(o options, start time.Time, publish func(i int, sentNs int64) publishWait) (time.Time, <-chan error) {
	interval := float64(time.Second) / o.rate
	waits := make(chan publishWait, o.messages)
	errs := make(chan error, o.messages)
	go func() {
		for wait := range waits {
			if err := wait(); err != nil {
				errs <- err
			}
		}
		close(errs)
	}()
	for i := range o.messages {
		due := start.Add(time.Duration(float64(i) * interval))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		waits <- publish(i, time.Now().UnixNano())
	}
	close(waits)
	return time.Now(), errs
}

// finishLatency waits for every publish result and every message (or the
// deadline), stops the receiver, and fills in the result.
func finishLatency(
	r *run, c clock, s *seen, publishEnd time.Time, errs <-chan error,
	stopReceiving func() error, collect func(),
) error {
	o := r.o
	failed := 0
	for err := range errs {
		failed++
		r.fail("publish: %s", err)
	}
	timedOut := false
	select {
	case <-s.done:
	case <-time.After(time.Until(c.start.Add(o.timeout))):
		timedOut = true
	}
	c.stop(r, time.Now())
	if err := stopReceiving(); err != nil {
		r.fail("receive: %s", err)
	}
	received, distinct := s.counts()
	collect()
	r.mu.Lock()
	r.res.Published = o.messages - failed
	r.res.PublishS = publishEnd.Sub(c.start).Seconds()
	r.res.Received, r.res.Distinct = received, distinct
	r.mu.Unlock()
	if timedOut {
		r.fail("timeout after %s: %d of %d distinct", o.timeout, distinct, o.messages)
	}
	return nil
}

// --- NATS JetStream (nats.go) --------------------------------------------------

func runNats(ctx context.Context, r *run) error {
	if r.o.natsURL == "" {
		return errors.New("-nats-url is required")
	}
	switch r.o.mode {
	case "publish":
		return natsPublish(ctx, r)
	case "drain", "latency":
		// The receiver's connection, and the push consumer it binds to.
		nc, js, err := natsConnect(r.o)
		if err != nil {
			return err
		}
		defer nc.Close()
		if err := natsPushConsumer(js, r.o); err != nil {
			return err
		}
		if r.o.mode == "drain" {
			return natsDrain(r, nc, js)
		}
		return natsLatency(ctx, r, nc, js)
	}
	return fmt.Errorf("unknown -mode %q", r.o.mode)
}

func natsConnect(o options) (*nats.Conn, nats.JetStreamContext, error) {
	nc, err := nats.Connect(o.natsURL, nats.NoReconnect())
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	js, err := nc.JetStream()
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

func natsPublish(ctx context.Context, r *run) error {
	o := r.o
	counts, offsets := split(o.messages, o.publishers)
	streams := make([]nats.JetStreamContext, o.publishers)
	bodies := make([][][]byte, o.publishers)
	for k := range o.publishers {
		nc, js, err := natsConnect(o)
		if err != nil {
			return err
		}
		defer nc.Close()
		streams[k] = js
		bodies[k] = payloads(o.firstIndex+offsets[k], counts[k])
	}
	for k, js := range streams {
		if _, err := js.Publish(o.subject, payload(-1-k)); err != nil {
			return fmt.Errorf("warm-up publish: %w", err)
		}
	}
	publishAll(ctx, r, bodies, func(ctx context.Context, k int, body []byte) error {
		_, err := streams[k].Publish(o.subject, body, nats.Context(ctx))
		return err
	}, func(ctx context.Context, k int, published *atomic.Int64) {
		futures := make([]nats.PubAckFuture, 0, len(bodies[k]))
		for _, body := range bodies[k] {
			for {
				f, err := streams[k].PublishAsync(o.subject, body)
				if errors.Is(err, nats.ErrTooManyStalledMsgs) && ctx.Err() == nil {
					continue // the window of pending acks is full: try again
				}
				if err != nil {
					r.fail("publish: %s", err)
					return
				}
				futures = append(futures, f)
				break
			}
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
				published.Add(1)
			case err := <-f.Err():
				r.fail("publish: %s", err)
			case <-ctx.Done():
				return
			}
		}
	})
	return nil
}

// natsPushConsumer creates the durable push consumer the receiver binds to.
func natsPushConsumer(js nats.JetStreamContext, o options) error {
	_, err := js.AddConsumer(o.stream, &nats.ConsumerConfig{
		Durable:        o.consumer,
		DeliverSubject: nats.NewInbox(),
		DeliverPolicy:  nats.DeliverAllPolicy,
		AckPolicy:      nats.AckExplicitPolicy,
		AckWait:        o.ackWait,
		MaxAckPending:  o.maxOutstanding,
	})
	if err != nil {
		return fmt.Errorf("add consumer: %w", err)
	}
	return nil
}

// natsReceiver subscribes to the push consumer; onMessage runs on the
// subscription's one goroutine, which then acks the message.
func natsReceiver(js nats.JetStreamContext, o options, s *seen, acked, redelivered *atomic.Int64,
	onMessage func(m *nats.Msg, first bool)) (*nats.Subscription, error) {
	sub, err := js.Subscribe("", func(m *nats.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		first := s.add(strconv.FormatUint(meta.Sequence.Stream, 10))
		if !first {
			redelivered.Add(1)
		}
		onMessage(m, first)
		if m.Ack() == nil {
			acked.Add(1)
		}
	}, nats.Bind(o.stream, o.consumer), nats.ManualAck())
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	// The consumer's MaxAckPending bounds what is in flight; never drop.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("pending limits: %w", err)
	}
	return sub, nil
}

func natsDrain(r *run, nc *nats.Conn, js nats.JetStreamContext) error {
	o := r.o
	s := newSeen(o.messages)
	var acked, redelivered atomic.Int64
	c := ready(o)
	sub, err := natsReceiver(js, o, s, &acked, &redelivered, func(m *nats.Msg, _ bool) {
		if len(m.Data) != messageBytes {
			r.fail("message: %d bytes", len(m.Data))
		}
	})
	if err != nil {
		return err
	}
	timedOut := false
	select {
	case <-s.done:
	case <-time.After(o.timeout):
		timedOut = true
	}
	// A round trip: the server has read every ack sent before it.
	if err := nc.Flush(); err != nil {
		r.fail("flush: %s", err)
	}
	c.stop(r, time.Now())
	if err := sub.Unsubscribe(); err != nil {
		r.fail("unsubscribe: %s", err)
	}
	r.received(s, &redelivered, &acked, timedOut)
	return nil
}

func natsLatency(ctx context.Context, r *run, nc *nats.Conn, js nats.JetStreamContext) error {
	o := r.o
	// The publisher has a connection of its own, as the Pub/Sub side has a stream of its own.
	pnc, pjs, err := natsConnect(o)
	if err != nil {
		return err
	}
	defer pnc.Close()
	s := newSeen(o.messages)
	var mu sync.Mutex
	latencies := make([]float64, 0, o.messages)
	var acked, redelivered atomic.Int64
	sub, err := natsReceiver(js, o, s, &acked, &redelivered, func(m *nats.Msg, first bool) {
		now := time.Now().UnixNano()
		sent, perr := strconv.ParseInt(m.Header.Get(sentAttr), 10, 64)
		switch {
		case perr != nil:
			r.fail("message: header %s=%q", sentAttr, m.Header.Get(sentAttr))
		case first:
			mu.Lock()
			latencies = append(latencies, ms(time.Duration(now-sent)))
			mu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	bodies := payloads(o.firstIndex, o.messages)
	time.Sleep(receiverSettle)
	c := ready(o)
	publishEnd, errs := pace(o, c.start, func(i int, sentNs int64) publishWait {
		msg := nats.NewMsg(o.subject)
		msg.Data = bodies[i]
		msg.Header.Set(sentAttr, strconv.FormatInt(sentNs, 10))
		f, err := pjs.PublishMsgAsync(msg)
		return func() error {
			if err != nil {
				return err
			}
			select {
			case <-f.Ok():
				return nil
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	stop := func() error {
		if err := nc.Flush(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		return sub.Unsubscribe()
	}
	return finishLatency(r, c, s, publishEnd, errs, stop, func() {
		mu.Lock()
		defer mu.Unlock()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.res.LatenciesMs = append(r.res.LatenciesMs, latencies...)
		r.res.Acked, r.res.Redelivered = int(acked.Load()), int(redelivered.Load())
	})
}
