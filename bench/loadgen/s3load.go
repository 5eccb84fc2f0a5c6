package main

// The S3 bench's load through Google's Go client (bench/s3, --client go): the
// same two roles and JSON lines as bench/s3/load.py, for offered rates the
// Python client cannot reach on a small machine (it takes a thread per batch it
// sends; at 1,000 single-message publishes a second it used more than a core).
//
//   - s3publish: -rate messages a second in all for -duration seconds, spread
//     evenly over -topics (a comma list), each published at its scheduled time
//     whatever the answers (an open loop), with the client's default batching or
//     with -single one message per request. Each carries its scheduled time
//     (attribute sent-ns, Unix nanoseconds). Prints {"sent", "acked",
//     "failures", "failure_kinds", "ack_ms": {"p50", "p99"} from schedule to
//     answer, "ack_p50_ms_by_window": the median of each 5 s of the schedule,
//     "finished_behind_s", "cpu_s"}.
//   - s3subscribe: one StreamingPull stream per subscription of -subscriptions,
//     acking each message; prints "ready" once the streams are asked for, then,
//     when -messages distinct messages arrived (or none came for stallAfter, or
//     -timeout passed), {"distinct", "duplicates", "e2e_ms": {"p50", "p99"},
//     "cpu_s"}: publish schedule to callback.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
)

const (
	s3SentAttr = "sent-ns" // bench/s3/load.py's SENT
	stallAfter = 30 * time.Second
	// The last answers and duplicates that follow the end.
	s3Linger = time.Second
	// The publish latency's median is also reported per this much of the schedule
	// (bench/s3/load.py's WINDOW_S): whether a run fell behind from its start or later.
	s3Window = 5 * time.Second
)

// quantiles is {"p50", "p99"} as bench/report.py's quantile picks them (index int(q*n)).
func quantiles(values []float64) map[string]float64 {
	out := map[string]float64{"p50": -1, "p99": -1}
	if len(values) == 0 {
		return out
	}
	sort.Float64s(values)
	for name, q := range map[string]float64{"p50": 0.5, "p99": 0.99} {
		out[name] = values[min(len(values)-1, int(q*float64(len(values))))]
	}
	return out
}

func printJSON(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		line = fmt.Appendf(nil, `{"errors":[%q]}`, err.Error())
	}
	fmt.Println(string(line))
}

func s3Publish(ctx context.Context, o options, topics []string) error {
	client, err := pubsub.NewClient(ctx, o.project)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer client.Close()
	publishers := make([]*pubsub.Publisher, len(topics))
	for k, t := range topics {
		publishers[k] = client.Publisher(t)
		if o.single {
			publishers[k].PublishSettings.CountThreshold = 1
		}
		defer publishers[k].Stop()
	}
	body := payload(0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	latencies := make([]float64, 0, o.messages)
	kinds := map[string]int{}
	failures := 0
	var byBucket [][]float64
	interval := float64(time.Second) / o.rate
	start, cpu := time.Now(), cpuSeconds()
	for i := range o.messages {
		due := start.Add(time.Duration(float64(i) * interval))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		res := publishers[i%len(topics)].Publish(ctx, &pubsub.Message{
			Data:       body,
			Attributes: map[string]string{s3SentAttr: strconv.FormatInt(due.UnixNano(), 10)},
		})
		wg.Go(func() {
			_, err := res.Get(ctx)
			answered := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				kinds[strings.SplitN(err.Error(), ":", 2)[0]]++
				return
			}
			latencies = append(latencies, ms(answered.Sub(due)))
			b := int(due.Sub(start) / s3Window)
			for len(byBucket) <= b {
				byBucket = append(byBucket, nil)
			}
			byBucket[b] = append(byBucket[b], ms(answered.Sub(due)))
		})
	}
	wg.Wait()
	time.Sleep(s3Linger / 5)
	mu.Lock()
	defer mu.Unlock()
	kindList := make([]string, 0, len(kinds))
	for k := range kinds {
		kindList = append(kindList, k)
	}
	sort.Strings(kindList)
	byWindow := make([]float64, len(byBucket))
	for k, b := range byBucket {
		byWindow[k] = quantiles(b)["p50"]
	}
	printJSON(map[string]any{
		"sent":                 o.messages,
		"acked":                len(latencies),
		"failures":             failures,
		"failure_kinds":        kindList,
		"ack_ms":               quantiles(latencies),
		"ack_p50_ms_by_window": byWindow,
		"finished_behind_s":    time.Since(start).Seconds() - o.duration.Seconds(),
		"cpu_s":                cpuSeconds() - cpu,
	})
	return nil
}

func s3Subscribe(ctx context.Context, o options, subscriptions []string) error {
	client, err := pubsub.NewClient(ctx, o.project)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer client.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	seen := make(map[string]struct{}, o.messages)
	latencies := make([]float64, 0, o.messages)
	duplicates := 0
	lastNew := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(subscriptions))
	for _, name := range subscriptions {
		sub := client.Subscriber(name)
		sub.ReceiveSettings.NumGoroutines = 1
		wg.Go(func() {
			err := sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
				now := time.Now().UnixNano()
				m.Ack()
				key := name + "\x00" + m.ID
				mu.Lock()
				defer mu.Unlock()
				if _, dup := seen[key]; dup {
					duplicates++
					return
				}
				seen[key] = struct{}{}
				lastNew = time.Now()
				if sent, perr := strconv.ParseInt(m.Attributes[s3SentAttr], 10, 64); perr == nil {
					latencies = append(latencies, ms(time.Duration(now-sent)))
				}
			})
			if err != nil {
				errs <- err
			}
		})
	}
	fmt.Println("ready")
	cpu := cpuSeconds()
	deadline := time.Now().Add(o.timeout)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := len(seen) >= o.messages || (len(seen) > 0 && time.Since(lastNew) > stallAfter)
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(s3Linger)
	cancel()
	wg.Wait()
	close(errs)
	mu.Lock()
	defer mu.Unlock()
	out := map[string]any{
		"distinct": len(seen), "duplicates": duplicates, "e2e_ms": quantiles(latencies),
		"cpu_s": cpuSeconds() - cpu,
	}
	for err := range errs {
		out["error"] = err.Error()
	}
	printJSON(out)
	return nil
}

// runS3 runs -mode s3publish or s3subscribe; it prints its own result line and exits.
func runS3(ctx context.Context, o options) {
	var err error
	switch o.mode {
	case "s3publish":
		err = s3Publish(ctx, o, strings.Split(o.topic, ","))
	case "s3subscribe":
		err = s3Subscribe(ctx, o, strings.Split(o.subscription, ","))
	}
	if err != nil {
		printJSON(map[string]any{"errors": []string{err.Error()}})
		os.Exit(1)
	}
	os.Exit(0)
}
