// SparkCallsDriver: the Kafka client calls that Spark 4's Kafka connector (spark-sql-kafka-0-10) makes,
// on the Java client it is built with (kafka-clients 3.9.2 for Spark 4.2.0), as a small CLI for kbroker's compat suite.
// It talks to a broker over TCP and prints one JSON object per line on stdout; diagnostics go to stderr.
//
// Where each call comes from in Spark's connector (sources of Spark v4.0.0, external/kafka-0-10-sql):
//   plan     the driver's offset reader (KafkaOffsetReaderAdmin + ConsumerStrategy): Admin.create with the
//            driver's params, describeCluster, listTopics(listInternal=false) for subscribePattern,
//            describeTopics(...).allTopicNames(), listOffsets with OffsetSpec.earliest()/latest()/
//            forTimestamp(ts) and ListOffsetsOptions(isolation level of kafka.isolation.level).
//   read     an executor's consumer (KafkaDataConsumer / InternalKafkaConsumer): a KafkaConsumer with
//            auto.offset.reset=none, enable.auto.commit=false, group.id "<id>-executor",
//            receive.buffer.bytes=65536; assign(tp); the available range with seekToBeginning + position
//            and seekToEnd + position; records of [from, until) with seek(offset) + poll + records(tp) +
//            position(tp) (the position tells how far a poll got, e.g. over transaction markers);
//            OffsetOutOfRangeException means data loss (failOnDataLoss).
//   produce  the sink (KafkaWriteTask): a KafkaProducer with ByteArraySerializers and otherwise default
//            settings (so idempotent, acks=all), ProducerRecord(topic, partition|null, timestamp|null, key,
//            value, headers) with a callback, then flush.
//
// Build/run (compat_tests/test_spark_calls.py does this for you):
//   scripts/fetch_jars.sh clients39
//   javac -d .cache/spark-calls-classes -cp '.cache/jars-3.9/*' compat_tests/java/SparkCallsDriver.java
//   java -cp '.cache/spark-calls-classes:.cache/jars-3.9/*' SparkCallsDriver <command> [--option value ...]
//
// Commands:
//   produce  --bootstrap B --topic T --count N [--partitions P] [--compression none|gzip|snappy|lz4|zstd]
//            [--base-ts MS] [--ts-step 1] [--tag S] [--start-index 0] [--linger-ms 50] [--batch-size 4096]
//            [--prop k=v ...]
//       Record i: partition i % P (or the partitioner's choice without --partitions), key "<tag>-k<i>"
//       (null when i % 5 == 4), value "{\"tag\":\"<tag>\",\"i\":<i>}" + " " * (i % 13), headers
//       i=<i> and src=spark, timestamp base-ts + i * ts-step (or null: the client's clock, as Spark's
//       writer does). Prints {"event":"ack",...} per record, then {"event":"done",...}.
//   plan     --bootstrap B (--topic T ... | --pattern REGEX | --assign T:p,...) [--isolation L] [--timestamp MS ...]
//       Prints {"event":"cluster"}, {"event":"partitions"}, then {"event":"offsets","spec":S,"offsets":{...}}
//       for S in earliest, latest and ts:<MS> ("T-p" -> {"offset":..,"timestamp":..}).
//   read     --bootstrap B --topic T --range P:FROM:UNTIL [--range ...] [--isolation L] [--group-id G]
//            [--poll-timeout-ms 5000] [--fail-on-data-loss true|false] [--max-poll-records 500]
//       One fresh executor consumer per --range (as one Spark task per offset range). Prints per range
//       {"event":"range","partition":P,"earliest":..,"latest":..}, one {"event":"poll",...} per poll,
//       {"event":"record",...} per record in [FROM, UNTIL), {"event":"data_loss",...} when data was lost,
//       {"event":"range_done","partition":P,"count":n,"next_offset":..}; then {"event":"done","count":total}.
//
// Errors print {"event":"error","error_class":...,"message":...}; exit 1 (client/broker error) or
// 2 (bad usage). Network operations are bounded by request/API timeouts of about 10 s.

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Pattern;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class SparkCallsDriver {

    static final int REQUEST_TIMEOUT_MS = 10_000;
    static final int API_TIMEOUT_MS = 10_000;

    static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    public static void main(String[] argv) {
        int rc;
        try {
            rc = run(argv);
        } catch (UsageException e) {
            emit(obj("event", "error", "error_class", "UsageException", "message", e.getMessage()));
            System.err.println("usage error: " + e.getMessage());
            rc = 2;
        } catch (Throwable t) {
            Throwable c = unwrap(t);
            emit(obj("event", "error", "error_class", c.getClass().getSimpleName(), "message", String.valueOf(c.getMessage())));
            c.printStackTrace(System.err);
            rc = 1;
        }
        OUT.flush();
        System.exit(rc);
    }

    static int run(String[] argv) throws Exception {
        if (argv.length == 0) throw new UsageException("missing command: produce|plan|read|version");
        Args a = Args.parse(argv, 1);
        switch (argv[0]) {
            case "produce":
                return produce(a);
            case "plan":
                return plan(a);
            case "read":
                return read(a);
            case "version":
                emit(obj("event", "version", "client_version", org.apache.kafka.common.utils.AppInfoParser.getVersion(),
                        "java_version", System.getProperty("java.version")));
                return 0;
            default:
                throw new UsageException("unknown command: " + argv[0]);
        }
    }

    static void common(Properties p, String bootstrap, String clientId) {
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        p.put("request.timeout.ms", Integer.toString(REQUEST_TIMEOUT_MS));
        p.put("socket.connection.setup.timeout.ms", "5000");
        p.put("socket.connection.setup.timeout.max.ms", "10000");
        p.put("reconnect.backoff.max.ms", "1000");
    }

    // ------------------------------------------------------------------ record content

    /** Must match compat_tests/test_spark_calls.py (spark_record). */
    static byte[] key(String tag, int i) {
        return i % 5 == 4 ? null : (tag + "-k" + i).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] value(String tag, int i) {
        return ("{\"tag\":\"" + tag + "\",\"i\":" + i + "}" + " ".repeat(i % 13)).getBytes(StandardCharsets.UTF_8);
    }

    static RecordHeaders headers(int i) {
        RecordHeaders h = new RecordHeaders();
        h.add("i", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
        h.add("src", "spark".getBytes(StandardCharsets.UTF_8));
        return h;
    }

    // ------------------------------------------------------------------ produce (the sink)

    static int produce(Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        String topic = a.req("topic");
        int count = a.integer("count", 10);
        int start = a.integer("start-index", 0);
        int partitions = a.integer("partitions", 0);
        String tag = a.get("tag", "spark");
        Long baseTs = a.has("base-ts") ? Long.valueOf(a.longv("base-ts", 0)) : null;
        long tsStep = a.longv("ts-step", 1);

        // KafkaSourceProvider.kafkaParamsForProducer: the user's kafka.* options plus the two serializers.
        Properties p = new Properties();
        common(p, bootstrap, "kbroker-spark-calls-producer");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("compression.type", a.get("compression", "none"));
        p.put("linger.ms", a.get("linger-ms", "50"));
        p.put("batch.size", a.get("batch-size", "4096"));
        p.put("max.block.ms", Integer.toString(API_TIMEOUT_MS));
        p.put("delivery.timeout.ms", Integer.toString(REQUEST_TIMEOUT_MS + 5_000 + a.integer("linger-ms", 50)));
        a.applyProps(p);

        AtomicInteger acked = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        long t0 = System.currentTimeMillis();
        boolean idempotent;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = start; i < start + count; i++) {
                final int idx = i;
                Integer part = partitions > 0 ? Integer.valueOf(i % partitions) : null;
                Long ts = baseTs == null ? null : Long.valueOf(baseTs + (long) i * tsStep);
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, part, ts, key(tag, i), value(tag, i), headers(i));
                producer.send(rec, (md, err) -> {
                    Map<String, Object> o = obj("event", "ack", "index", idx);
                    if (err != null) {
                        failed.incrementAndGet();
                        o.put("error_class", err.getClass().getSimpleName());
                        o.put("error", String.valueOf(err.getMessage()));
                    } else {
                        acked.incrementAndGet();
                        o.put("partition", md.partition());
                        o.put("offset", md.hasOffset() ? md.offset() : -1L);
                        o.put("timestamp", md.hasTimestamp() ? md.timestamp() : -1L);
                    }
                    emit(o);
                });
            }
            producer.flush();
            idempotent = Boolean.parseBoolean(String.valueOf(p.getOrDefault("enable.idempotence", "true")));
        }
        emit(obj("event", "done", "acked", acked.get(), "failed", failed.get(), "idempotent", idempotent,
                "elapsed_ms", System.currentTimeMillis() - t0));
        return failed.get() == 0 && acked.get() == count ? 0 : 1;
    }

    // ------------------------------------------------------------------ plan (the driver's offset reader)

    static IsolationLevel isolation(Args a) throws UsageException {
        String iso = a.get("isolation", "read_uncommitted");
        if (iso.equals("read_committed")) return IsolationLevel.READ_COMMITTED;
        if (iso.equals("read_uncommitted")) return IsolationLevel.READ_UNCOMMITTED;
        throw new UsageException("--isolation wants read_committed|read_uncommitted, got " + iso);
    }

    static Properties driverParams(Args a, String bootstrap) {
        // KafkaSourceProvider.kafkaParamsForDriver: consumer settings the Admin client ignores, kept as Spark passes them.
        Properties p = new Properties();
        common(p, bootstrap, "kbroker-spark-calls-admin");
        p.put("default.api.timeout.ms", Integer.toString(API_TIMEOUT_MS));
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("max.poll.records", "1");
        p.put("receive.buffer.bytes", "65536");
        p.put("isolation.level", a.get("isolation", "read_uncommitted"));
        a.applyProps(p);
        return p;
    }

    static String tpName(TopicPartition tp) {
        return tp.topic() + "-" + tp.partition();
    }

    static int plan(Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        IsolationLevel iso = isolation(a);
        try (Admin admin = Admin.create(driverParams(a, bootstrap))) {
            DescribeClusterResult dc = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : dc.nodes().get()) nodes.add(obj("id", n.id(), "host", n.host(), "port", n.port()));
            Node controller = dc.controller().get();
            emit(obj("event", "cluster", "cluster_id", dc.clusterId().get(), "nodes", nodes,
                    "controller", controller == null ? null : controller.id()));

            // ConsumerStrategy: AssignStrategy / SubscribeStrategy / SubscribePatternStrategy
            List<TopicPartition> tps = new ArrayList<>();
            if (a.has("assign")) {
                Set<String> topics = new TreeSet<>();
                List<TopicPartition> wanted = new ArrayList<>();
                for (String s : a.get("assign", "").split(",")) {
                    int colon = s.lastIndexOf(':');
                    if (colon <= 0) throw new UsageException("--assign wants T:p,..., got " + s);
                    wanted.add(new TopicPartition(s.substring(0, colon), Integer.parseInt(s.substring(colon + 1))));
                    topics.add(s.substring(0, colon));
                }
                Set<TopicPartition> existing = new java.util.HashSet<>(partitionsOf(admin, topics));
                for (TopicPartition tp : wanted) {
                    if (!existing.contains(tp)) throw new IllegalStateException("assigned partition " + tp + " does not exist");
                    tps.add(tp);
                }
            } else {
                Collection<String> topics;
                if (a.has("pattern")) {
                    Pattern pat = Pattern.compile(a.req("pattern"));
                    Set<String> all = admin.listTopics(new ListTopicsOptions().listInternal(false)).names().get();
                    List<String> matched = new ArrayList<>();
                    for (String t : new TreeSet<>(all)) if (pat.matcher(t).matches()) matched.add(t);
                    emit(obj("event", "pattern", "matched", matched));
                    topics = matched;
                } else {
                    topics = a.all("topic");
                    if (topics.isEmpty()) throw new UsageException("plan needs --topic, --pattern or --assign");
                }
                tps.addAll(partitionsOf(admin, topics));
            }
            List<Object> plist = new ArrayList<>();
            for (TopicPartition tp : tps) plist.add(obj("topic", tp.topic(), "partition", tp.partition()));
            emit(obj("event", "partitions", "partitions", plist));

            ListOffsetsOptions opts = new ListOffsetsOptions(iso);
            Map<String, OffsetSpec> specs = new LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            for (String ts : a.all("timestamp")) specs.put("ts:" + ts, OffsetSpec.forTimestamp(Long.parseLong(ts)));
            for (Map.Entry<String, OffsetSpec> e : specs.entrySet()) {
                Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                for (TopicPartition tp : tps) req.put(tp, e.getValue());
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = admin.listOffsets(req, opts).all().get();
                Map<String, Object> out = new TreeMap<>();
                for (TopicPartition tp : tps) {
                    ListOffsetsResult.ListOffsetsResultInfo info = res.get(tp);
                    out.put(tpName(tp), obj("offset", info.offset(), "timestamp", info.timestamp()));
                }
                emit(obj("event", "offsets", "spec", e.getKey(), "isolation", iso.toString(), "offsets", out));
            }
        }
        return 0;
    }

    static List<TopicPartition> partitionsOf(Admin admin, Collection<String> topics) throws Exception {
        List<TopicPartition> tps = new ArrayList<>();
        if (topics.isEmpty()) return tps;
        Map<String, TopicDescription> descs = admin.describeTopics(topics).allTopicNames().get();
        for (String t : new TreeSet<>(descs.keySet())) {
            TopicDescription td = descs.get(t);
            if (td.isInternal()) continue;  // Spark filters internal topics out
            for (TopicPartitionInfo pi : td.partitions()) tps.add(new TopicPartition(t, pi.partition()));
        }
        return tps;
    }

    // ------------------------------------------------------------------ read (an executor's consumer)

    static int read(Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        String topic = a.req("topic");
        List<String> ranges = a.all("range");
        if (ranges.isEmpty()) throw new UsageException("read needs --range PARTITION:FROM:UNTIL (repeatable)");
        int total = 0;
        for (String r : ranges) {
            String[] f = r.split(":");
            if (f.length != 3) throw new UsageException("--range wants PARTITION:FROM:UNTIL, got " + r);
            try {
                total += readRange(a, bootstrap, new TopicPartition(topic, Integer.parseInt(f[0])), Long.parseLong(f[1]),
                        Long.parseLong(f[2]));
            } catch (NumberFormatException e) {
                throw new UsageException("--range wants integers, got " + r);
            }
        }
        emit(obj("event", "done", "count", total));
        return 0;
    }

    /** One Spark task: a fresh executor consumer reading [from, until) of one partition. */
    static int readRange(Args a, String bootstrap, TopicPartition tp, long from, long until) throws Exception {
        long pollTimeoutMs = a.longv("poll-timeout-ms", 5_000);
        boolean failOnDataLoss = a.bool("fail-on-data-loss", true);

        // KafkaSourceProvider.kafkaParamsForExecutors
        Properties p = new Properties();
        common(p, bootstrap, "kbroker-spark-calls-executor");
        p.put("default.api.timeout.ms", Integer.toString(API_TIMEOUT_MS));
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("auto.offset.reset", "none");
        p.put("enable.auto.commit", "false");
        p.put("group.id", a.get("group-id", "spark-kafka-source-" + UUID.randomUUID() + "-" + Math.abs(tp.hashCode()) + "-executor"));
        p.put("receive.buffer.bytes", "65536");
        p.put("isolation.level", a.get("isolation", "read_uncommitted"));
        p.put("max.poll.records", a.get("max-poll-records", "500"));
        a.applyProps(p);

        int n = 0;
        long offset = from;
        int part = tp.partition();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(tp));
            long[] range = availableRange(c, tp);
            emit(obj("event", "range", "partition", part, "earliest", range[0], "latest", range[1]));
            int emptyPolls = 0;
            while (offset < until) {
                List<ConsumerRecord<byte[], byte[]>> recs;
                long after;
                try {
                    c.seek(tp, offset);
                    ConsumerRecords<byte[], byte[]> polled = c.poll(Duration.ofMillis(pollTimeoutMs));
                    recs = polled.records(tp);
                    after = c.position(tp);
                } catch (OffsetOutOfRangeException e) {
                    range = availableRange(c, tp);
                    emit(obj("event", "data_loss", "partition", part, "offset", offset, "earliest", range[0],
                            "latest", range[1], "reason", "OffsetOutOfRangeException"));
                    if (failOnDataLoss) throw e;
                    offset = Math.max(offset, range[0]);
                    continue;
                }
                long firstOff = recs.isEmpty() ? -1 : recs.get(0).offset();
                long lastOff = recs.isEmpty() ? -1 : recs.get(recs.size() - 1).offset();
                emit(obj("event", "poll", "partition", part, "seek", offset, "count", recs.size(), "first", firstOff,
                        "last", lastOff, "position_after", after));
                if (recs.isEmpty()) {
                    if (after > offset) {  // skipped over records that are not data (e.g. transaction markers)
                        offset = after;
                        continue;
                    }
                    range = availableRange(c, tp);
                    if (offset < range[0]) {
                        emit(obj("event", "data_loss", "partition", part, "offset", offset, "earliest", range[0],
                                "latest", range[1], "reason", "before log start"));
                        if (failOnDataLoss) throw new IllegalStateException("data loss: offset " + offset + " < earliest " + range[0]);
                        offset = range[0];
                        continue;
                    }
                    if (offset >= range[1] || ++emptyPolls >= 3) {
                        throw new java.util.concurrent.TimeoutException("Cannot fetch record for offset " + offset + " in "
                                + pollTimeoutMs + " milliseconds (available " + range[0] + ".." + range[1] + ")");
                    }
                    continue;
                }
                emptyPolls = 0;
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    if (r.offset() < offset) continue;
                    if (r.offset() >= until) break;
                    if (r.offset() > offset) emit(obj("event", "gap", "partition", part, "expected", offset, "got", r.offset()));
                    List<Object> hs = new ArrayList<>();
                    for (Header h : r.headers()) hs.add(Arrays.asList(h.key(), b64(h.value())));
                    emit(obj("event", "record", "partition", r.partition(), "offset", r.offset(), "timestamp", r.timestamp(),
                            "timestamp_type", r.timestampType().name, "key", b64(r.key()), "value", b64(r.value()),
                            "headers", hs));
                    n++;
                    offset = r.offset() + 1;
                }
                if (offset < after && after <= until && lastOff < after - 1) {
                    offset = after;  // the poll ended on records that are not data
                }
            }
        }
        emit(obj("event", "range_done", "partition", part, "count", n, "next_offset", offset));
        return n;
    }

    /** InternalKafkaConsumer.getAvailableOffsetRange: seekToBeginning + position, seekToEnd + position. */
    static long[] availableRange(KafkaConsumer<byte[], byte[]> c, TopicPartition tp) {
        c.seekToBeginning(Set.of(tp));
        long earliest = c.position(tp);
        c.seekToEnd(Set.of(tp));
        long latest = c.position(tp);
        return new long[] {earliest, latest};
    }

    // ------------------------------------------------------------------ helpers

    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String m) {
            super(m);
        }
    }

    static final class Args {
        final Map<String, List<String>> m = new LinkedHashMap<>();

        static final Set<String> KNOWN = Set.of("bootstrap", "topic", "count", "partitions", "compression", "base-ts",
                "ts-step", "tag", "start-index", "linger-ms", "batch-size", "prop", "pattern", "assign", "isolation",
                "timestamp", "range", "group-id", "poll-timeout-ms", "fail-on-data-loss",
                "max-poll-records");

        static Args parse(String[] argv, int from) throws UsageException {
            Args a = new Args();
            for (int i = from; i < argv.length; i++) {
                String s = argv[i];
                if (!s.startsWith("--")) throw new UsageException("unexpected argument: " + s);
                String name = s.substring(2);
                if (!KNOWN.contains(name)) throw new UsageException("unknown option --" + name);
                if (i + 1 >= argv.length) throw new UsageException("option --" + name + " needs a value");
                a.m.computeIfAbsent(name, k -> new ArrayList<>()).add(argv[++i]);
            }
            return a;
        }

        boolean has(String k) {
            return m.containsKey(k);
        }

        String get(String k, String dflt) {
            List<String> v = m.get(k);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        List<String> all(String k) {
            return m.getOrDefault(k, List.of());
        }

        String req(String k) throws UsageException {
            String v = get(k, null);
            if (v == null) throw new UsageException("missing required option --" + k);
            return v;
        }

        int integer(String k, int dflt) throws UsageException {
            return (int) longv(k, dflt);
        }

        long longv(String k, long dflt) throws UsageException {
            String v = get(k, null);
            if (v == null) return dflt;
            try {
                return Long.parseLong(v);
            } catch (NumberFormatException e) {
                throw new UsageException("--" + k + " wants an integer, got " + v);
            }
        }

        boolean bool(String k, boolean dflt) throws UsageException {
            String v = get(k, null);
            if (v == null) return dflt;
            if (v.equals("true")) return true;
            if (v.equals("false")) return false;
            throw new UsageException("--" + k + " wants true|false, got " + v);
        }

        void applyProps(Properties p) {
            for (String kv : all("prop")) {
                int eq = kv.indexOf('=');
                if (eq > 0) p.put(kv.substring(0, eq), kv.substring(eq + 1));
            }
        }
    }

    static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    static String b64(byte[] b) {
        return b == null ? null : Base64.getEncoder().encodeToString(b);
    }

    static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i + 1 < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static synchronized void emit(Map<String, Object> o) {
        StringBuilder sb = new StringBuilder();
        json(sb, o);
        OUT.println(sb);
        OUT.flush();
    }

    static void json(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String) {
            str(sb, (String) v);
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                str(sb, String.valueOf(e.getKey()));
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object x : (Collection<?>) v) {
                if (!first) sb.append(',');
                first = false;
                json(sb, x);
            }
            sb.append(']');
        } else {
            str(sb, v.toString());
        }
    }

    static void str(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        sb.append('"');
    }
}
