// Publish COUNT messages and receive them back through StreamingPull with the
// unmodified Node client; the client finds the server through PUBSUB_EMULATOR_HOST.
//
//   node receive.mjs --project P --topic T --subscription S --count N [--ordered] [--timeout SECONDS]
//
// (or PROJECT, TOPIC, SUBSCRIPTION, COUNT, ORDERED=1, TIMEOUT_S in the environment).
// Prints one JSON line: {"published", "received", "distinct", "ordered_ok", "errors"}
// plus timings (publish_s, receive_s, total_s);
// exits 0 when every message arrived (in key order if ordered) and nothing failed.
import { PubSub } from '@google-cloud/pubsub';

const ALREADY_EXISTS = 6; // google.rpc.Code
const ORDERING_KEYS = 4; // messages i with i % 5 != 0 get key "k<i % 4>"; the rest none

function options(argv, env) {
  const flags = {};
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '');
    if (name === 'ordered') flags.ordered = true;
    else flags[name] = argv[++i];
  }
  return {
    project: flags.project ?? env.PROJECT ?? 'clients',
    topic: flags.topic ?? env.TOPIC ?? 'node-topic',
    subscription: flags.subscription ?? env.SUBSCRIPTION ?? 'node-sub',
    count: Number(flags.count ?? env.COUNT ?? 500),
    ordered: Boolean(flags.ordered ?? ['1', 'true'].includes(env.ORDERED ?? '')),
    timeoutS: Number(flags.timeout ?? env.TIMEOUT_S ?? 60),
  };
}

function orderingKey(i) {
  return i % 5 === 0 ? '' : `k${i % ORDERING_KEYS}`;
}

const MAX_ERROR_CHARS = 400; // a gax retry error repeats every attempt; keep the line short

function describe(err) {
  return String(err?.message ?? err).slice(0, MAX_ERROR_CHARS);
}

async function ignoreAlreadyExists(promise) {
  try {
    await promise;
  } catch (err) {
    if (err?.code !== ALREADY_EXISTS) throw err;
  }
}

// Each key's messages, in the order they were first delivered, must be in publish order.
function orderedOk(firstSeen, errors) {
  const lastByKey = new Map();
  for (const i of firstSeen) {
    const key = orderingKey(i);
    if (!key) continue;
    const last = lastByKey.get(key) ?? -1;
    if (i < last) {
      errors.push(`order: key ${key} got m-${i} after m-${last}`);
      return false;
    }
    lastByKey.set(key, i);
  }
  return true;
}

async function main() {
  // The emulator needs no credentials: never look for a cloud metadata server.
  process.env.METADATA_SERVER_DETECTION ??= 'none';
  const opts = options(process.argv.slice(2), process.env);
  const result = { published: 0, received: 0, distinct: 0, ordered_ok: null, errors: [] };
  const started = Date.now();
  const seconds = (since) => Math.round((Date.now() - since) / 10) / 100;
  const pubsub = new PubSub({ projectId: opts.project });
  const seen = new Set();
  const firstSeen = [];
  let stage = 'create topic';

  const report = () => {
    result.distinct = seen.size;
    result.total_s = seconds(started);
    if (opts.ordered) result.ordered_ok = orderedOk(firstSeen, result.errors);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    const ok =
      result.errors.length === 0 && seen.size === opts.count && result.ordered_ok !== false;
    process.exit(ok ? 0 : 1);
  };
  // Admin calls and publishes retry for up to a minute on their own: the deadline is ours.
  setTimeout(() => {
    result.errors.push(`timeout after ${opts.timeoutS} s in ${stage}: ${seen.size} of ${opts.count} distinct`);
    report();
  }, opts.timeoutS * 1000);

  try {
    await ignoreAlreadyExists(pubsub.createTopic(opts.topic));
    stage = 'create subscription';
    await ignoreAlreadyExists(
      pubsub.createSubscription(opts.topic, opts.subscription, {
        enableMessageOrdering: opts.ordered,
      }),
    );

    stage = 'publish';
    const publishStarted = Date.now();
    const topic = pubsub.topic(opts.topic, { messageOrdering: opts.ordered });
    const publishes = [];
    for (let i = 0; i < opts.count; i++) {
      const message = { data: Buffer.from(`m-${i}`), attributes: { i: String(i) } };
      if (opts.ordered && orderingKey(i)) message.orderingKey = orderingKey(i);
      publishes.push(
        topic.publishMessage(message).then(
          () => result.published++,
          (err) => result.errors.push(`publish m-${i}: ${describe(err)}`),
        ),
      );
    }
    await Promise.all(publishes);
    await topic.flush();
    result.publish_s = seconds(publishStarted);

    stage = 'receive';
    const receiveStarted = Date.now();
    const subscription = pubsub.subscription(opts.subscription);
    await new Promise((resolve) => {
      subscription.on('error', (err) => {
        result.errors.push(`subscribe: ${describe(err)}`);
        resolve();
      });
      subscription.on('message', (message) => {
        result.received++;
        const i = Number(message.attributes.i);
        if (message.data.toString() !== `m-${i}`) {
          result.errors.push(`message ${message.id}: data ${message.data} attribute i=${i}`);
        }
        if (!seen.has(i)) {
          seen.add(i);
          firstSeen.push(i);
          if ((message.orderingKey ?? '') !== (opts.ordered ? orderingKey(i) : '')) {
            result.errors.push(`m-${i}: ordering key "${message.orderingKey}"`);
          }
        }
        message.ack();
        if (seen.size >= opts.count) resolve();
      });
    });
    result.receive_s = seconds(receiveStarted);
    stage = 'close';
    await subscription.close();
  } catch (err) {
    result.errors.push(`${stage}: ${describe(err)}`);
  }
  try {
    await pubsub.close();
  } catch (err) {
    result.errors.push(`close: ${describe(err)}`);
  }
  report();
}

main();
