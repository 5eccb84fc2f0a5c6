// Command receive publishes COUNT messages and receives them back through
// StreamingPull (Subscriber.Receive) with the unmodified Go client; the client
// finds the server through PUBSUB_EMULATOR_HOST.
//
//	receive --project P --topic T --subscription S --count N [--ordered] [--timeout SECONDS]
//	        [--rounds R] [--idle SECONDS]
//
// (or PROJECT, TOPIC, SUBSCRIPTION, COUNT, ORDERED=1, TIMEOUT_S, ROUNDS, IDLE_S in the
// environment). It prints one JSON line {"published", "received", "distinct",
// "ordered_ok", "errors"} plus timings (publish_s, receive_s, total_s) and exits 0 when
// every message arrived (in key order if ordered) and nothing failed.
//
// Then, R times: shut the subscriber down cleanly, publish one message, start a new
// subscriber and time how long the message takes to reach it (reopen_s). Then, with
// --idle, keep a subscriber open on an empty subscription for that long and count the
// StreamingPull calls it had to open beyond its first (idle_reopened): a server
// that does not answer the client's keepalive pings gets its streams torn down.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// orderingKeys: message i with i%5 != 0 gets key "k<i%4>"; the rest none.
const orderingKeys = 4

// maxErrorChars keeps one error short: retry errors can repeat every attempt.
const maxErrorChars = 400

type result struct {
	Published    int       `json:"published"`
	Received     int       `json:"received"`
	Distinct     int       `json:"distinct"`
	OrderedOK    *bool     `json:"ordered_ok"`
	Errors       []string  `json:"errors"`
	ReopenS      []float64 `json:"reopen_s"`
	IdleReopened *int      `json:"idle_reopened"`
	PublishS     float64   `json:"publish_s,omitempty"`
	ReceiveS     float64   `json:"receive_s,omitempty"`
	TotalS       float64   `json:"total_s"`
}

func seconds(since time.Time) float64 {
	return float64(time.Since(since).Milliseconds()/10) / 100
}

type options struct {
	project, topic, subscription string
	count                        int
	ordered                      bool
	timeout                      time.Duration
	rounds                       int
	idle                         time.Duration
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func parseOptions() options {
	count, _ := strconv.Atoi(envOr("COUNT", "500"))
	timeoutS, _ := strconv.ParseFloat(envOr("TIMEOUT_S", "60"), 64)
	rounds, _ := strconv.Atoi(envOr("ROUNDS", "0"))
	idleS, _ := strconv.ParseFloat(envOr("IDLE_S", "0"), 64)
	ordered := envOr("ORDERED", "") == "1" || envOr("ORDERED", "") == "true"
	var o options
	flag.StringVar(&o.project, "project", envOr("PROJECT", "clients"), "project id")
	flag.StringVar(&o.topic, "topic", envOr("TOPIC", "go-topic"), "topic id")
	flag.StringVar(&o.subscription, "subscription", envOr("SUBSCRIPTION", "go-sub"), "subscription id")
	flag.IntVar(&o.count, "count", count, "messages to publish")
	flag.BoolVar(&o.ordered, "ordered", ordered, "publish with ordering keys and check key order")
	flag.Float64Var(&timeoutS, "timeout", timeoutS, "overall deadline, seconds")
	flag.IntVar(&o.rounds, "rounds", rounds, "close, publish, reopen this many times")
	flag.Float64Var(&idleS, "idle", idleS, "then stay subscribed, idle, this long (seconds)")
	flag.Parse()
	o.timeout = time.Duration(timeoutS * float64(time.Second))
	o.idle = time.Duration(idleS * float64(time.Second))
	return o
}

func orderingKey(i int) string {
	if i%5 == 0 {
		return ""
	}
	return fmt.Sprintf("k%d", i%orderingKeys)
}

func describe(err error) string {
	s := err.Error()
	if len(s) > maxErrorChars {
		s = s[:maxErrorChars]
	}
	return s
}

func ignoreAlreadyExists(err error) error {
	if status.Code(err) == codes.AlreadyExists {
		return nil
	}
	return err
}

// state is what the run has seen so far; the receive callback and the
// watchdog touch it from other goroutines, hence the mutex.
type state struct {
	mu        sync.Mutex
	o         options
	res       result
	stage     string
	seen      map[int]bool
	firstSeen []int
	started   time.Time
}

func (st *state) fail(format string, args ...any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.res.Errors = append(st.res.Errors, fmt.Sprintf(format, args...))
}

func (st *state) enter(stage string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.stage = stage
}

// deliver records one delivery; it reports whether every message has now been seen.
func (st *state) deliver(m *pubsub.Message) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.res.Received++
	i, err := strconv.Atoi(m.Attributes["i"])
	if err != nil || string(m.Data) != fmt.Sprintf("m-%d", i) {
		st.res.Errors = append(st.res.Errors,
			fmt.Sprintf("message %s: data %q attribute i=%q", m.ID, m.Data, m.Attributes["i"]))
	}
	if !st.seen[i] {
		st.seen[i] = true
		st.firstSeen = append(st.firstSeen, i)
		want := ""
		if st.o.ordered {
			want = orderingKey(i)
		}
		if m.OrderingKey != want {
			st.res.Errors = append(st.res.Errors, fmt.Sprintf("m-%d: ordering key %q", i, m.OrderingKey))
		}
	}
	return len(st.seen) >= st.o.count
}

// report prints the JSON line and exits: 0 only if all arrived, in order, without errors.
func (st *state) report(timedOut bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	res := &st.res
	res.Distinct = len(st.seen)
	res.TotalS = seconds(st.started)
	if timedOut {
		res.Errors = append(res.Errors, fmt.Sprintf("timeout after %s in %s: %d of %d distinct",
			st.o.timeout, st.stage, res.Distinct, st.o.count))
	}
	if st.o.ordered {
		ok := st.orderedOK()
		res.OrderedOK = &ok
	}
	line, _ := json.Marshal(res)
	fmt.Println(string(line))
	if len(res.Errors) > 0 || res.Distinct != st.o.count || (res.OrderedOK != nil && !*res.OrderedOK) {
		os.Exit(1)
	}
	os.Exit(0)
}

// orderedOK: each key's messages, in the order first delivered, are in publish order.
func (st *state) orderedOK() bool {
	last := map[string]int{}
	for _, i := range st.firstSeen {
		key := orderingKey(i)
		if key == "" {
			continue
		}
		if prev, ok := last[key]; ok && i < prev {
			st.res.Errors = append(st.res.Errors, fmt.Sprintf("order: key %s got m-%d after m-%d", key, i, prev))
			return false
		}
		last[key] = i
	}
	return true
}

// streamCounter counts the StreamingPull calls the client opens (a gRPC stats handler).
type streamCounter struct{ opened atomic.Int64 }

func (c *streamCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if strings.HasSuffix(info.FullMethodName, "/StreamingPull") {
		c.opened.Add(1)
	}
	return ctx
}
func (c *streamCounter) HandleRPC(context.Context, stats.RPCStats) {}
func (c *streamCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *streamCounter) HandleConn(context.Context, stats.ConnStats) {}

func run(ctx context.Context, st *state) {
	o := st.o
	streams := &streamCounter{}
	client, err := pubsub.NewClient(ctx, o.project, option.WithGRPCDialOption(grpc.WithStatsHandler(streams)))
	if err != nil {
		st.fail("client: %s", describe(err))
		return
	}
	defer client.Close()

	topicName := fmt.Sprintf("projects/%s/topics/%s", o.project, o.topic)
	subName := fmt.Sprintf("projects/%s/subscriptions/%s", o.project, o.subscription)
	st.enter("create topic")
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topicName})
	if err = ignoreAlreadyExists(err); err != nil {
		st.fail("create topic: %s", describe(err))
		return
	}
	st.enter("create subscription")
	_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subName, Topic: topicName, EnableMessageOrdering: o.ordered,
	})
	if err = ignoreAlreadyExists(err); err != nil {
		st.fail("create subscription: %s", describe(err))
		return
	}

	st.enter("publish")
	publishStarted := time.Now()
	publisher := client.Publisher(topicName)
	publisher.EnableMessageOrdering = o.ordered
	results := make([]*pubsub.PublishResult, o.count)
	for i := range o.count {
		msg := &pubsub.Message{Data: fmt.Appendf(nil, "m-%d", i), Attributes: map[string]string{"i": strconv.Itoa(i)}}
		if o.ordered {
			msg.OrderingKey = orderingKey(i)
		}
		results[i] = publisher.Publish(ctx, msg)
	}
	for i, r := range results {
		if _, err := r.Get(ctx); err != nil {
			st.fail("publish m-%d: %s", i, describe(err))
			continue
		}
		st.mu.Lock()
		st.res.Published++
		st.mu.Unlock()
	}
	publisher.Stop()
	st.mu.Lock()
	st.res.PublishS = seconds(publishStarted)
	st.mu.Unlock()

	st.enter("receive")
	receiveStarted := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = client.Subscriber(subName).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		all := st.deliver(m)
		m.Ack()
		if all {
			st.mu.Lock()
			if st.res.ReceiveS == 0 {
				st.res.ReceiveS = seconds(receiveStarted)
			}
			st.mu.Unlock()
			cancel()
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		st.fail("receive: %s", describe(err))
	}
	for round := 1; round <= o.rounds && ctx.Err() == nil; round++ {
		st.enter(fmt.Sprintf("round %d", round))
		reopen(ctx, st, client, topicName, subName, round)
	}
	if o.idle > 0 && ctx.Err() == nil {
		st.enter("idle")
		idle(ctx, st, client, subName, streams)
	}
	st.enter("close")
}

// reopen publishes one message with no subscriber open (the last one shut down
// cleanly), then times a new subscriber's wait for it.
func reopen(ctx context.Context, st *state, client *pubsub.Client, topicName, subName string, round int) {
	publisher := client.Publisher(topicName)
	data := fmt.Sprintf("round-%d", round)
	_, err := publisher.Publish(ctx, &pubsub.Message{Data: []byte(data)}).Get(ctx)
	publisher.Stop()
	if err != nil {
		st.fail("round %d publish: %s", round, describe(err))
		return
	}
	started := time.Now()
	rctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	got := false
	err = client.Subscriber(subName).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		if string(m.Data) == data {
			st.mu.Lock()
			if !got {
				got = true
				st.res.ReopenS = append(st.res.ReopenS, seconds(started))
			}
			st.mu.Unlock()
			cancel()
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		st.fail("round %d receive: %s", round, describe(err))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !got {
		st.res.Errors = append(st.res.Errors, fmt.Sprintf("round %d: %q not received within %s", round, data, roundTimeout))
	}
}

// idle keeps a subscriber open with nothing to receive and counts the streams it
// opened beyond the first.
func idle(ctx context.Context, st *state, client *pubsub.Client, subName string, streams *streamCounter) {
	before := streams.opened.Load()
	ictx, cancel := context.WithTimeout(ctx, st.o.idle)
	defer cancel()
	err := client.Subscriber(subName).Receive(ictx, func(_ context.Context, m *pubsub.Message) { m.Ack() })
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		st.fail("idle receive: %s", describe(err))
	}
	opened := int(streams.opened.Load() - before)
	st.mu.Lock()
	defer st.mu.Unlock()
	reopened := max(0, opened-receiveStreams)
	st.res.IdleReopened = &reopened
}

// roundTimeout: how long a round waits for its message (the test asserts far less).
const roundTimeout = 20 * time.Second

// receiveStreams: the StreamingPull calls one Receive opens at first (the client's
// default NumGoroutines).
const receiveStreams = 1

// closeGrace: how long past the deadline shutdown may take before the run counts as hung.
const closeGrace = 10 * time.Second

func main() {
	st := &state{o: parseOptions(), res: result{Errors: []string{}, ReopenS: []float64{}}, seen: map[int]bool{}, started: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), st.o.timeout)
	defer cancel()
	time.AfterFunc(st.o.timeout+closeGrace, func() {
		st.fail("hung %s past the deadline", closeGrace)
		st.report(true)
	})
	run(ctx, st)
	st.report(ctx.Err() != nil)
}
