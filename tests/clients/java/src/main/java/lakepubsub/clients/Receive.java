package lakepubsub.clients;

import com.google.api.core.ApiFuture;
import com.google.api.core.ApiService;
import com.google.api.gax.core.CredentialsProvider;
import com.google.api.gax.core.NoCredentialsProvider;
import com.google.api.gax.grpc.GrpcTransportChannel;
import com.google.api.gax.rpc.AlreadyExistsException;
import com.google.api.gax.rpc.FixedTransportChannelProvider;
import com.google.api.gax.rpc.TransportChannelProvider;
import com.google.cloud.pubsub.v1.MessageReceiver;
import com.google.cloud.pubsub.v1.Publisher;
import com.google.cloud.pubsub.v1.Subscriber;
import com.google.cloud.pubsub.v1.SubscriptionAdminClient;
import com.google.cloud.pubsub.v1.SubscriptionAdminSettings;
import com.google.cloud.pubsub.v1.TopicAdminClient;
import com.google.cloud.pubsub.v1.TopicAdminSettings;
import com.google.common.util.concurrent.MoreExecutors;
import com.google.protobuf.ByteString;
import com.google.pubsub.v1.ProjectSubscriptionName;
import com.google.pubsub.v1.PubsubMessage;
import com.google.pubsub.v1.Subscription;
import com.google.pubsub.v1.TopicName;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Publishes COUNT messages and receives them back through StreamingPull with the unmodified Java
 * client, wired to PUBSUB_EMULATOR_HOST the way Google documents for the emulator (plaintext
 * channel, no credentials).
 *
 * <pre>java -jar receive.jar --project P --topic T --subscription S --count N [--ordered] [--timeout 60]
 *     [--rounds R] [--idle SECONDS]</pre>
 *
 * <p>(or PROJECT, TOPIC, SUBSCRIPTION, COUNT, ORDERED=1, TIMEOUT_S, ROUNDS, IDLE_S in the
 * environment). Prints one JSON line {"published", "received", "distinct", "ordered_ok", "errors"}
 * plus timings (publish_s, receive_s, total_s) and exits 0 when every message arrived (in key order
 * if ordered) and nothing failed.
 *
 * <p>Then, R times: with the last subscriber shut down cleanly, publish one message, start a new
 * subscriber and time how long the message takes to reach it (reopen_s). Then, with --idle, keep a
 * subscriber open on an empty subscription that long and count the StreamingPull calls opened
 * after its first ones settled (idle_reopened): a server that leaves the client's keepalive pings
 * unanswered gets its streams torn down.
 */
public final class Receive {
  /** Message i with i % 5 != 0 gets key "k(i % 4)"; the rest none. */
  private static final int ORDERING_KEYS = 4;
  /** Retry errors can repeat every attempt: keep each one short. */
  private static final int MAX_ERROR_CHARS = 400;
  /** How long past the deadline shutdown may take before the run counts as hung. */
  private static final long CLOSE_GRACE_MS = 10_000;
  /** How long a round waits for its message (the test asserts far less). */
  private static final long ROUND_TIMEOUT_MS = 20_000;
  /** Streams a subscriber opens at first are counted once this long after it started. */
  private static final long IDLE_SETTLE_MS = 5_000;

  private final String project;
  private final String topic;
  private final String subscription;
  private final int count;
  private final boolean ordered;
  private final long timeoutMs;
  private final long deadline;
  private final int rounds;
  private final long idleMs;
  private final AtomicInteger streamsOpened = new AtomicInteger();
  private final List<Double> reopenS = new ArrayList<>();
  private Integer idleReopened;
  private final CountDownLatch finished = new CountDownLatch(1);

  private final Object lock = new Object();
  private final List<String> errors = new ArrayList<>();
  private final Set<Integer> seen = new HashSet<>();
  private final List<Integer> firstSeen = new ArrayList<>();
  private final CountDownLatch allSeen = new CountDownLatch(1);
  private int published;
  private int received;
  private String stage = "create topic";
  private final long started = System.currentTimeMillis();
  private Double publishS;
  private Double receiveS;
  private long receiveStarted;

  private Receive(Map<String, String> opts) {
    project = opts.getOrDefault("project", "clients");
    topic = opts.getOrDefault("topic", "java-topic");
    subscription = opts.getOrDefault("subscription", "java-sub");
    count = Integer.parseInt(opts.getOrDefault("count", "500"));
    ordered = Set.of("1", "true").contains(opts.getOrDefault("ordered", ""));
    timeoutMs = (long) (Double.parseDouble(opts.getOrDefault("timeout", "60")) * 1000);
    deadline = System.currentTimeMillis() + timeoutMs;
    rounds = Integer.parseInt(opts.getOrDefault("rounds", "0"));
    idleMs = (long) (Double.parseDouble(opts.getOrDefault("idle", "0")) * 1000);
  }

  private static Map<String, String> options(String[] args) {
    Map<String, String> opts = new HashMap<>();
    String[][] env = {
      {"project", "PROJECT"}, {"topic", "TOPIC"}, {"subscription", "SUBSCRIPTION"},
      {"count", "COUNT"}, {"ordered", "ORDERED"}, {"timeout", "TIMEOUT_S"},
      {"rounds", "ROUNDS"}, {"idle", "IDLE_S"},
    };
    for (String[] pair : env) {
      String value = System.getenv(pair[1]);
      if (value != null && !value.isEmpty()) {
        opts.put(pair[0], value);
      }
    }
    for (int i = 0; i < args.length; i++) {
      String name = args[i].replaceFirst("^--", "");
      opts.put(name, name.equals("ordered") ? "1" : args[++i]);
    }
    return opts;
  }

  static String orderingKey(int i) {
    return i % 5 == 0 ? "" : "k" + (i % ORDERING_KEYS);
  }

  private static String describe(Throwable t) {
    Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
    String s = cause.getClass().getSimpleName() + ": " + cause.getMessage();
    return s.length() > MAX_ERROR_CHARS ? s.substring(0, MAX_ERROR_CHARS) : s;
  }

  private void fail(String error) {
    synchronized (lock) {
      errors.add(error);
    }
  }

  private void enter(String next) {
    synchronized (lock) {
      stage = next;
    }
  }

  private void run() throws Exception {
    String host = System.getenv("PUBSUB_EMULATOR_HOST");
    if (host == null || host.isEmpty()) {
      fail("PUBSUB_EMULATOR_HOST is not set");
      return;
    }
    ManagedChannel channel =
        ManagedChannelBuilder.forTarget(host).usePlaintext().intercept(countStreams()).build();
    try {
      TransportChannelProvider channels =
          FixedTransportChannelProvider.create(GrpcTransportChannel.create(channel));
      CredentialsProvider credentials = NoCredentialsProvider.create();
      TopicName topicName = TopicName.of(project, topic);
      ProjectSubscriptionName subName = ProjectSubscriptionName.of(project, subscription);

      try (TopicAdminClient admin =
          TopicAdminClient.create(
              TopicAdminSettings.newBuilder()
                  .setTransportChannelProvider(channels)
                  .setCredentialsProvider(credentials)
                  .build())) {
        admin.createTopic(topicName);
      } catch (AlreadyExistsException e) {
        // a topic left from an earlier run is fine
      }
      enter("create subscription");
      try (SubscriptionAdminClient admin =
          SubscriptionAdminClient.create(
              SubscriptionAdminSettings.newBuilder()
                  .setTransportChannelProvider(channels)
                  .setCredentialsProvider(credentials)
                  .build())) {
        admin.createSubscription(
            Subscription.newBuilder()
                .setName(subName.toString())
                .setTopic(topicName.toString())
                .setEnableMessageOrdering(ordered)
                .build());
      } catch (AlreadyExistsException e) {
        // likewise
      }

      enter("publish");
      long publishStarted = System.currentTimeMillis();
      Publisher publisher =
          Publisher.newBuilder(topicName)
              .setChannelProvider(channels)
              .setCredentialsProvider(credentials)
              .setEnableMessageOrdering(ordered)
              .build();
      List<ApiFuture<String>> results = new ArrayList<>();
      for (int i = 0; i < count; i++) {
        PubsubMessage.Builder message =
            PubsubMessage.newBuilder()
                .setData(ByteString.copyFromUtf8("m-" + i))
                .putAttributes("i", Integer.toString(i));
        if (ordered) {
          message.setOrderingKey(orderingKey(i));
        }
        results.add(publisher.publish(message.build()));
      }
      for (int i = 0; i < count; i++) {
        try {
          results.get(i).get();
          synchronized (lock) {
            published++;
          }
        } catch (ExecutionException e) {
          fail("publish m-" + i + ": " + describe(e));
        }
      }
      publisher.shutdown();
      publisher.awaitTermination(10, TimeUnit.SECONDS);
      synchronized (lock) {
        publishS = seconds(publishStarted);
      }

      enter("receive");
      synchronized (lock) {
        receiveStarted = System.currentTimeMillis();
      }
      MessageReceiver receiver =
          (message, consumer) -> {
            deliver(message);
            consumer.ack();
          };
      Subscriber subscriber =
          Subscriber.newBuilder(subName, receiver)
              .setChannelProvider(channels)
              .setCredentialsProvider(credentials)
              .build();
      subscriber.addListener(
          new ApiService.Listener() {
            @Override
            public void failed(ApiService.State from, Throwable failure) {
              fail("subscriber failed (" + from + "): " + describe(failure));
              allSeen.countDown();
            }
          },
          MoreExecutors.directExecutor());
      subscriber.startAsync().awaitRunning();
      allSeen.await(Math.max(0, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
      enter("close");
      subscriber.stopAsync();
      try {
        subscriber.awaitTerminated(CLOSE_GRACE_MS, TimeUnit.MILLISECONDS);
      } catch (IllegalStateException e) {
        // failed already: the listener recorded why
      }
      for (int round = 1; round <= rounds; round++) {
        enter("round " + round);
        reopen(channels, credentials, topicName, subName, round);
      }
      if (idleMs > 0) {
        enter("idle");
        idle(channels, credentials, subName);
      }
      enter("close");
    } finally {
      channel.shutdownNow();
    }
  }

  /** Counts the StreamingPull calls made on the channel. */
  private ClientInterceptor countStreams() {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        if (method.getFullMethodName().endsWith("/StreamingPull")) {
          streamsOpened.incrementAndGet();
        }
        return next.newCall(method, options);
      }
    };
  }

  private Subscriber subscriber(
      TransportChannelProvider channels,
      CredentialsProvider credentials,
      ProjectSubscriptionName subName,
      MessageReceiver receiver) {
    return Subscriber.newBuilder(subName, receiver)
        .setChannelProvider(channels)
        .setCredentialsProvider(credentials)
        .build();
  }

  /** Publishes one message with no subscriber open, then times a new subscriber's wait for it. */
  private void reopen(
      TransportChannelProvider channels,
      CredentialsProvider credentials,
      TopicName topicName,
      ProjectSubscriptionName subName,
      int round)
      throws Exception {
    String data = "round-" + round;
    Publisher publisher =
        Publisher.newBuilder(topicName)
            .setChannelProvider(channels)
            .setCredentialsProvider(credentials)
            .build();
    try {
      publisher.publish(PubsubMessage.newBuilder().setData(ByteString.copyFromUtf8(data)).build()).get();
    } catch (ExecutionException e) {
      fail("round " + round + " publish: " + describe(e));
      return;
    } finally {
      publisher.shutdown();
      publisher.awaitTermination(10, TimeUnit.SECONDS);
    }
    CountDownLatch got = new CountDownLatch(1);
    long started = System.currentTimeMillis();
    Subscriber subscriber =
        subscriber(
            channels,
            credentials,
            subName,
            (message, consumer) -> {
              consumer.ack();
              if (message.getData().toStringUtf8().equals(data) && got.getCount() > 0) {
                synchronized (lock) {
                  reopenS.add(seconds(started));
                }
                got.countDown();
              }
            });
    subscriber.startAsync().awaitRunning();
    if (!got.await(ROUND_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
      fail("round " + round + ": \"" + data + "\" not received within " + ROUND_TIMEOUT_MS / 1000 + " s");
    }
    subscriber.stopAsync().awaitTerminated(CLOSE_GRACE_MS, TimeUnit.MILLISECONDS);
  }

  /** Keeps a subscriber open with nothing to receive; counts the streams it reopened. */
  private void idle(
      TransportChannelProvider channels,
      CredentialsProvider credentials,
      ProjectSubscriptionName subName)
      throws Exception {
    Subscriber subscriber =
        subscriber(channels, credentials, subName, (message, consumer) -> consumer.ack());
    subscriber.startAsync().awaitRunning();
    Thread.sleep(Math.min(IDLE_SETTLE_MS, idleMs));
    int settled = streamsOpened.get();
    Thread.sleep(Math.max(0, idleMs - IDLE_SETTLE_MS));
    int reopened = streamsOpened.get() - settled;
    subscriber.stopAsync().awaitTerminated(CLOSE_GRACE_MS, TimeUnit.MILLISECONDS);
    synchronized (lock) {
      idleReopened = reopened;
    }
  }

  private void deliver(PubsubMessage message) {
    synchronized (lock) {
      received++;
      String raw = message.getAttributesOrDefault("i", "");
      int i;
      try {
        i = Integer.parseInt(raw);
      } catch (NumberFormatException e) {
        errors.add("message " + message.getMessageId() + ": attribute i=" + raw);
        return;
      }
      if (!message.getData().toStringUtf8().equals("m-" + i)) {
        errors.add("message " + message.getMessageId() + ": data " + message.getData().toStringUtf8());
      }
      if (seen.add(i)) {
        firstSeen.add(i);
        String want = ordered ? orderingKey(i) : "";
        if (!message.getOrderingKey().equals(want)) {
          errors.add("m-" + i + ": ordering key \"" + message.getOrderingKey() + "\"");
        }
      }
      if (seen.size() >= count && receiveS == null) {
        receiveS = seconds(receiveStarted);
        allSeen.countDown();
      }
    }
  }

  /** Each key's messages, in the order first delivered, are in publish order. */
  private boolean orderedOk() {
    Map<String, Integer> last = new HashMap<>();
    for (int i : firstSeen) {
      String key = orderingKey(i);
      if (key.isEmpty()) {
        continue;
      }
      Integer prev = last.get(key);
      if (prev != null && i < prev) {
        errors.add("order: key " + key + " got m-" + i + " after m-" + prev);
        return false;
      }
      last.put(key, i);
    }
    return true;
  }

  /** Prints the JSON line and exits: 0 only if everything arrived, in order, without errors. */
  private void report() {
    synchronized (lock) {
      if (seen.size() < count && System.currentTimeMillis() >= deadline) {
        errors.add(
            "timeout after " + timeoutMs / 1000.0 + " s in " + stage + ": " + seen.size() + " of "
                + count + " distinct");
      }
      Boolean ok = ordered ? orderedOk() : null;
      StringBuilder line = new StringBuilder();
      line.append("{\"published\": ").append(published);
      line.append(", \"received\": ").append(received);
      line.append(", \"distinct\": ").append(seen.size());
      line.append(", \"ordered_ok\": ").append(ok == null ? "null" : ok.toString());
      line.append(", \"errors\": [");
      for (int i = 0; i < errors.size(); i++) {
        line.append(i == 0 ? "" : ", ").append(jsonString(errors.get(i)));
      }
      line.append("]");
      line.append(", \"reopen_s\": ").append(reopenS);
      line.append(", \"idle_reopened\": ").append(idleReopened == null ? "null" : idleReopened);
      if (publishS != null) {
        line.append(", \"publish_s\": ").append(publishS);
      }
      if (receiveS != null) {
        line.append(", \"receive_s\": ").append(receiveS);
      }
      line.append(", \"total_s\": ").append(seconds(started)).append("}");
      System.out.println(line);
      System.out.flush();
      boolean success = errors.isEmpty() && seen.size() == count && !Boolean.FALSE.equals(ok);
      Runtime.getRuntime().halt(success ? 0 : 1);
    }
  }

  private static double seconds(long sinceMs) {
    return (System.currentTimeMillis() - sinceMs) / 10 / 100.0;
  }

  private static String jsonString(String s) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }

  public static void main(String[] args) {
    Receive receive = new Receive(options(args));
    // Admin calls and publishes retry for a minute or more on their own: the deadline is ours.
    Thread watchdog =
        new Thread(
            () -> {
              try {
                if (!receive.allSeen.await(receive.timeoutMs, TimeUnit.MILLISECONDS)) {
                  receive.report();
                }
                long left = Math.max(0, receive.deadline - System.currentTimeMillis());
                if (!receive.finished.await(left + CLOSE_GRACE_MS, TimeUnit.MILLISECONDS)) {
                  receive.fail("hung " + CLOSE_GRACE_MS / 1000 + " s past the deadline");
                  receive.report();
                }
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            });
    watchdog.setDaemon(true);
    watchdog.start();
    try {
      receive.run();
    } catch (Exception e) {
      String stage;
      synchronized (receive.lock) {
        stage = receive.stage;
      }
      receive.fail(stage + ": " + describe(e));
    }
    receive.finished.countDown();
    receive.report();
  }
}
