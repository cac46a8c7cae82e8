// KafkaDriver: a small CLI around the real Apache Kafka Java client (kafka-clients 4.3.1), used by
// the kbroker compat suite (compat_tests/). It talks to a broker over TCP and prints one JSON
// object per line on stdout; diagnostics go to stderr.
//
// Build/run (the pytest fixture `java_driver` does this for you):
//   scripts/fetch_jars.sh
//   javac -d compat_tests/java/classes -cp '.cache/jars/*' compat_tests/java/KafkaDriver.java
//   java -cp 'compat_tests/java/classes:.cache/jars/*' KafkaDriver <command> [--option value ...]
//
// Commands:
//   produce       --bootstrap B --topic T --count N [--acks all|1|0|-1] [--compression none|gzip|snappy|lz4|zstd]
//                 [--idempotence true|false] [--linger-ms 5] [--batch-size 16384] [--partitions P]
//                 [--base-ts MS] [--ts-step 1] [--tag S] [--binary true|false] [--nulls true|false]
//                 [--start-index 0] [--sync false] [--delay-ms 0] [--pad 0] [--prop k=v ...]
//       Sends records whose content is a pure function of their index (see RecordSpec below and
//       compat_tests/records.py, which must agree). Prints {"event":"ack",...} per record as acks
//       arrive, then {"event":"done",...}. Exit 0 iff every record was acknowledged.
//   consume       --bootstrap B --topic T --expect N [--isolation read_uncommitted|read_committed]
//                 [--timeout-ms 30000] [--fetch-max-wait-ms 500] [--partitions 0,1] [--prop k=v ...]
//       assign() + seekToBeginning(), no consumer group. Prints {"event":"ready"} once positions are
//       resolved, one {"event":"record",...} per record, then {"event":"done","count":n}.
//   list-offsets  --bootstrap B --topic T [--timestamp MS ...]
//       AdminClient.listOffsets (earliest/latest/maxTimestamp/forTimestamp) and Consumer
//       beginningOffsets/endOffsets/offsetsForTimes, in one {"event":"offsets",...} object.
//   admin <sub>   --bootstrap B ...  with <sub> one of
//       create-topic --topic T [--partitions 1] [--replication-factor 1] [--config k=v ...]
//       describe-topic --topic T [--authorized-operations true] | list-topics | delete-topic --topic T
//       describe-cluster [--authorized-operations true]
//       describe-configs (--topic T | --broker ID | --group G)
//       create-token [--owner User:x] [--renewer User:y ...] [--max-life-ms N] | renew-token --hmac B64
//       [--period-ms N] | expire-token --hmac B64 [--period-ms N] | describe-tokens [--owner User:x ...]  (KIP-48)
//       create-acls --acl A ... | describe-acls --acl F | delete-acls --acl F ...  (A / F:
//       TYPE,name,PATTERN,principal,host,OPERATION,PERMISSION; an empty field of a filter matches any)
//   spec          --count N [--start-index 0] plus produce's content options: prints the records produce
//                 would send ({"event":"spec",...}), no broker; lets Python check RecordSpec parity.
//   selftest      compresses and decompresses with every codec through the client's own codec
//                 classes (checks the lz4/snappy/zstd jars and their native parts load). No broker.
//
// Errors print {"event":"error","error_class":...,"message":...}; exit 1 (client/broker error) or
// 2 (bad usage). All network operations are bounded by request/api timeouts of about 10 s.

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.ByteBuffer;
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
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaDriver {

    // Bounded timeouts so a dead or closed port fails in ~10 s instead of hanging.
    static Object opNames(java.util.Set<org.apache.kafka.common.acl.AclOperation> ops) {
        if (ops == null) return null;
        List<Object> out = new ArrayList<>();
        for (org.apache.kafka.common.acl.AclOperation op : ops) out.add(op.name());
        java.util.Collections.sort((List) out);
        return out;
    }

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
        if (argv.length == 0) throw new UsageException("missing command: produce|consume|list-offsets|admin|spec|selftest");
        String cmd = argv[0];
        switch (cmd) {
            case "produce":
                return produce(Args.parse(argv, 1));
            case "consume":
                return consume(Args.parse(argv, 1));
            case "list-offsets":
                return listOffsets(Args.parse(argv, 1));
            case "admin":
                if (argv.length < 2) throw new UsageException("admin needs a subcommand");
                return admin(argv[1], Args.parse(argv, 2));
            case "selftest":
                return selftest(Args.parse(argv, 1));
            case "spec":
                return spec(Args.parse(argv, 1));
            default:
                throw new UsageException("unknown command: " + cmd);
        }
    }

    // ------------------------------------------------------------------ record content

    /** Deterministic record content; must match compat_tests/records.py (RecordSpec). */
    static final class RecordSpec {
        static final String PATTERN = "the quick brown fox jumps over the lazy dog;";
        final String tag;
        final int partitions;
        final long baseTs;
        final long tsStep;
        final boolean binary;
        final boolean nulls;
        final int pad;

        RecordSpec(String tag, int partitions, long baseTs, long tsStep, boolean binary, boolean nulls, int pad) {
            this.tag = tag;
            this.partitions = partitions;
            this.baseTs = baseTs;
            this.tsStep = tsStep;
            this.binary = binary;
            this.nulls = nulls;
            this.pad = pad;
        }

        byte[] key(int i) {
            if (nulls && i % 7 == 6) return null;
            return ("key-" + i).getBytes(StandardCharsets.UTF_8);
        }

        byte[] value(int i) {
            if (nulls && i % 11 == 10) return null;
            StringBuilder sb = new StringBuilder();
            sb.append(tag).append(":value-").append(i).append('|');
            for (int r = 0; r < 1 + i % 4; r++) sb.append(PATTERN);
            byte[] text = sb.toString().getBytes(StandardCharsets.UTF_8);
            byte[] tail = binary ? new byte[] {(byte) (i & 0xff), 0x00, (byte) 0xff, (byte) 0x80, 0x0a} : new byte[0];
            byte[] out = Arrays.copyOf(text, text.length + tail.length + pad);
            System.arraycopy(tail, 0, out, text.length, tail.length);
            Arrays.fill(out, text.length + tail.length, out.length, (byte) '.');
            return out;
        }

        RecordHeaders headers(int i) {
            RecordHeaders h = new RecordHeaders();
            h.add("idx", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
            h.add("dup", "a".getBytes(StandardCharsets.UTF_8));
            h.add("dup", "b".getBytes(StandardCharsets.UTF_8));
            if (binary) h.add("bin", new byte[] {0x00, (byte) 0xff, (byte) (i & 0xff)});
            return h;
        }

        long timestamp(int i) {
            return baseTs + (long) i * tsStep;
        }

        Integer partition(int i) {
            return partitions > 0 ? i % partitions : null;
        }
    }

    // ------------------------------------------------------------------ produce

    static int produce(Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        String topic = a.req("topic");
        int count = a.integer("count", 10);
        int start = a.integer("start-index", 0);
        String acks = a.get("acks", "all");
        String compression = a.get("compression", "none");
        boolean idempotence = a.bool("idempotence", true);
        boolean sync = a.bool("sync", false);
        long delayMs = a.longv("delay-ms", 0);
        int lingerMs = a.integer("linger-ms", 5);
        RecordSpec spec = specFrom(a, "java");

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "kbroker-compat-java-producer");
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotence));
        p.put(ProducerConfig.LINGER_MS_CONFIG, Integer.toString(lingerMs));
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, a.get("batch-size", "16384"));
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(REQUEST_TIMEOUT_MS));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Integer.toString(API_TIMEOUT_MS));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Integer.toString(REQUEST_TIMEOUT_MS + lingerMs + 5_000));
        p.put(ProducerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "5000");
        p.put(ProducerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, "10000");
        p.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        if (!idempotence) p.put("max.in.flight.requests.per.connection", "1");
        a.applyProps(p);

        AtomicInteger acked = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        long t0 = System.currentTimeMillis();
        double throttleMax = 0.0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            for (int i = start; i < start + count; i++) {
                final int idx = i;
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, spec.partition(i), spec.timestamp(i),
                        spec.key(i), spec.value(i), spec.headers(i));
                Future<RecordMetadata> f = producer.send(rec, (md, err) -> {
                    Map<String, Object> o = obj("event", "ack", "index", idx, "ack_ms", System.currentTimeMillis());
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
                if (sync) {
                    try {
                        f.get();
                    } catch (ExecutionException e) {
                        // already reported by the callback
                    }
                } else {
                    futures.add(f);
                }
                if (delayMs > 0) Thread.sleep(delayMs);
            }
            producer.flush();
            for (Map.Entry<org.apache.kafka.common.MetricName, ? extends org.apache.kafka.common.Metric> m : producer.metrics().entrySet()) {
                if (m.getKey().group().equals("producer-metrics") && m.getKey().name().equals("produce-throttle-time-max")) {
                    Object v = m.getValue().metricValue();
                    if (v instanceof Double && !((Double) v).isNaN()) throttleMax = (Double) v;
                }
            }
        }
        emit(obj("event", "done", "acked", acked.get(), "failed", failed.get(), "elapsed_ms", System.currentTimeMillis() - t0,
                "produce_throttle_time_max", throttleMax));
        return failed.get() == 0 && acked.get() == count ? 0 : 1;
    }

    static RecordSpec specFrom(Args a, String defaultTag) throws UsageException {
        return new RecordSpec(a.get("tag", defaultTag), a.integer("partitions", 0),
                a.longv("base-ts", System.currentTimeMillis() - 60_000), a.longv("ts-step", 1),
                a.bool("binary", true), a.bool("nulls", true), a.integer("pad", 0));
    }

    static int spec(Args a) throws Exception {
        RecordSpec spec = specFrom(a, "java");
        int start = a.integer("start-index", 0);
        for (int i = start; i < start + a.integer("count", 10); i++) {
            List<Object> hs = new ArrayList<>();
            for (Header h : spec.headers(i)) hs.add(Arrays.asList(h.key(), b64(h.value())));
            emit(obj("event", "spec", "index", i, "partition", spec.partition(i), "timestamp", spec.timestamp(i),
                    "key", b64(spec.key(i)), "value", b64(spec.value(i)), "headers", hs));
        }
        return 0;
    }

    // ------------------------------------------------------------------ consume

    static Properties consumerProps(Args a, String bootstrap) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "kbroker-compat-java-consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, a.get("isolation", "read_uncommitted"));
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, a.get("fetch-max-wait-ms", "500"));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(REQUEST_TIMEOUT_MS));
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Integer.toString(API_TIMEOUT_MS));
        p.put(ConsumerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "5000");
        p.put(ConsumerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, "10000");
        p.put(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        p.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        a.applyProps(p);
        return p;
    }

    static List<TopicPartition> partitionsOf(KafkaConsumer<?, ?> c, String topic, String only) throws UsageException {
        List<TopicPartition> tps = new ArrayList<>();
        if (only != null && !only.isEmpty()) {
            for (String s : only.split(",")) tps.add(new TopicPartition(topic, Integer.parseInt(s.trim())));
            return tps;
        }
        List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofMillis(API_TIMEOUT_MS));
        if (infos == null || infos.isEmpty()) throw new KafkaException("no partitions found for topic " + topic);
        for (PartitionInfo pi : infos) tps.add(new TopicPartition(topic, pi.partition()));
        tps.sort((x, y) -> Integer.compare(x.partition(), y.partition()));
        return tps;
    }

    static int consume(Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        String topic = a.req("topic");
        int expect = a.integer("expect", Integer.MAX_VALUE);
        long timeoutMs = a.longv("timeout-ms", 30_000);
        int n = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(a, bootstrap))) {
            List<TopicPartition> tps = partitionsOf(c, topic, a.get("partitions", null));
            c.assign(tps);
            c.seekToBeginning(tps);
            List<Object> positions = new ArrayList<>();
            for (TopicPartition tp : tps) positions.add(obj("partition", tp.partition(), "position", c.position(tp)));
            emit(obj("event", "ready", "positions", positions, "ts", System.currentTimeMillis()));
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (n < expect && System.currentTimeMillis() < deadline) {
                long left = Math.max(1, Math.min(1000, deadline - System.currentTimeMillis()));
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(left));
                long recvMs = System.currentTimeMillis();
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    List<Object> hs = new ArrayList<>();
                    for (Header h : r.headers()) hs.add(Arrays.asList(h.key(), b64(h.value())));
                    Map<String, Object> o = obj("event", "record", "partition", r.partition(), "offset", r.offset(),
                            "timestamp", r.timestamp(), "timestamp_type", r.timestampType().name,
                            "key", b64(r.key()), "value", b64(r.value()), "headers", hs, "recv_ms", recvMs);
                    Optional<Integer> le = r.leaderEpoch();
                    o.put("leader_epoch", le.isPresent() ? le.get() : null);
                    emit(o);
                    n++;
                }
            }
        }
        emit(obj("event", "done", "count", n, "complete", n >= expect));
        return 0;
    }

    // ------------------------------------------------------------------ list-offsets

    static Map<String, Object> info(ListOffsetsResult.ListOffsetsResultInfo i) {
        Map<String, Object> o = obj("offset", i.offset(), "timestamp", i.timestamp());
        o.put("leader_epoch", i.leaderEpoch().isPresent() ? i.leaderEpoch().get() : null);
        return o;
    }

    static int listOffsets(Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        String topic = a.req("topic");
        List<Long> timestamps = new ArrayList<>();
        for (String s : a.all("timestamp")) timestamps.add(Long.parseLong(s));
        IsolationLevel iso = "read_committed".equals(a.get("isolation", "read_uncommitted"))
                ? IsolationLevel.READ_COMMITTED : IsolationLevel.READ_UNCOMMITTED;

        Map<String, Object> parts = new TreeMap<>((x, y) -> Integer.compare(Integer.parseInt(x), Integer.parseInt(y)));
        try (Admin admin = Admin.create(adminProps(a, bootstrap))) {
            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<TopicPartition> tps = new ArrayList<>();
            for (TopicPartitionInfo pi : td.partitions()) tps.add(new TopicPartition(topic, pi.partition()));
            org.apache.kafka.clients.admin.ListOffsetsOptions opts = new org.apache.kafka.clients.admin.ListOffsetsOptions(iso);
            Map<String, OffsetSpec> specs = new LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            specs.put("max_timestamp", OffsetSpec.maxTimestamp());
            for (long ts : timestamps) specs.put("ts:" + ts, OffsetSpec.forTimestamp(ts));
            Map<Integer, Map<String, Object>> adminRes = new HashMap<>();
            for (TopicPartition tp : tps) adminRes.put(tp.partition(), obj("for_timestamp", new LinkedHashMap<String, Object>()));
            for (Map.Entry<String, OffsetSpec> e : specs.entrySet()) {
                Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                for (TopicPartition tp : tps) req.put(tp, e.getValue());
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = admin.listOffsets(req, opts).all().get();
                for (TopicPartition tp : tps) {
                    Map<String, Object> pm = adminRes.get(tp.partition());
                    if (e.getKey().startsWith("ts:")) {
                        @SuppressWarnings("unchecked")
                        Map<String, Object> ft = (Map<String, Object>) pm.get("for_timestamp");
                        ft.put(e.getKey().substring(3), info(res.get(tp)));
                    } else {
                        pm.put(e.getKey(), info(res.get(tp)));
                    }
                }
            }
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(consumerProps(a, bootstrap))) {
                Duration t = Duration.ofMillis(API_TIMEOUT_MS);
                Map<TopicPartition, Long> begin = c.beginningOffsets(tps, t);
                Map<TopicPartition, Long> end = c.endOffsets(tps, t);
                Map<Integer, Map<String, Object>> forTimes = new HashMap<>();
                for (TopicPartition tp : tps) forTimes.put(tp.partition(), new LinkedHashMap<>());
                for (long ts : timestamps) {
                    Map<TopicPartition, Long> q = new HashMap<>();
                    for (TopicPartition tp : tps) q.put(tp, ts);
                    Map<TopicPartition, OffsetAndTimestamp> r = c.offsetsForTimes(q, t);
                    for (TopicPartition tp : tps) {
                        OffsetAndTimestamp ot = r.get(tp);
                        forTimes.get(tp.partition()).put(Long.toString(ts),
                                ot == null ? null : obj("offset", ot.offset(), "timestamp", ot.timestamp()));
                    }
                }
                for (TopicPartition tp : tps) {
                    parts.put(Integer.toString(tp.partition()), obj(
                            "admin", adminRes.get(tp.partition()),
                            "consumer", obj("beginning", begin.get(tp), "end", end.get(tp), "for_times", forTimes.get(tp.partition()))));
                }
            }
        }
        emit(obj("event", "offsets", "topic", topic, "partitions", parts));
        return 0;
    }

    // ------------------------------------------------------------------ admin

    static Properties adminProps(Args a, String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kbroker-compat-java-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, Integer.toString(REQUEST_TIMEOUT_MS));
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Integer.toString(API_TIMEOUT_MS));
        p.put(AdminClientConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "5000");
        p.put(AdminClientConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, "10000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "1000");
        a.applyProps(p);
        return p;
    }

    static Object nodeJson(Node n) {
        if (n == null) return null;
        return obj("id", n.id(), "host", n.host(), "port", n.port(), "rack", n.rack());
    }

    static List<Object> ids(Collection<Node> nodes) {
        List<Object> out = new ArrayList<>();
        for (Node n : nodes) out.add(n.id());
        return out;
    }

    static int admin(String sub, Args a) throws Exception {
        String bootstrap = a.req("bootstrap");
        try (Admin admin = Admin.create(adminProps(a, bootstrap))) {
            switch (sub) {
                case "create-topic": {
                    String topic = a.req("topic");
                    NewTopic nt = new NewTopic(topic, Optional.of(a.integer("partitions", 1)),
                            Optional.of((short) a.integer("replication-factor", 1)));
                    Map<String, String> cfg = new LinkedHashMap<>();
                    for (String kv : a.all("config")) {
                        int eq = kv.indexOf('=');
                        if (eq <= 0) throw new UsageException("--config wants key=value, got " + kv);
                        cfg.put(kv.substring(0, eq), kv.substring(eq + 1));
                    }
                    if (!cfg.isEmpty()) nt.configs(cfg);
                    CreateTopicsResult r = admin.createTopics(List.of(nt));
                    r.all().get();
                    Uuid id = r.topicId(topic).get();
                    emit(obj("event", "created", "topic", topic, "topic_id", id == null ? null : id.toString(),
                            "partitions", r.numPartitions(topic).get(), "replication_factor", r.replicationFactor(topic).get()));
                    return 0;
                }
                case "describe-topic": {
                    String topic = a.req("topic");
                    boolean withOps = Boolean.parseBoolean(a.get("authorized-operations", "false"));
                    TopicDescription td = admin.describeTopics(List.of(topic),
                            new DescribeTopicsOptions().includeAuthorizedOperations(withOps)).allTopicNames().get().get(topic);
                    List<Object> ps = new ArrayList<>();
                    for (TopicPartitionInfo pi : td.partitions()) {
                        ps.add(obj("partition", pi.partition(), "leader", pi.leader() == null ? null : pi.leader().id(),
                                "replicas", ids(pi.replicas()), "isr", ids(pi.isr())));
                    }
                    emit(obj("event", "topic", "name", td.name(), "topic_id", td.topicId() == null ? null : td.topicId().toString(),
                            "internal", td.isInternal(), "partitions", ps, "authorized_operations", opNames(td.authorizedOperations())));
                    return 0;
                }
                case "list-topics": {
                    Set<String> names = admin.listTopics(new ListTopicsOptions().listInternal(a.bool("internal", false))).names().get();
                    List<Object> sorted = new ArrayList<>(new java.util.TreeSet<>(names));
                    emit(obj("event", "topics", "topics", sorted));
                    return 0;
                }
                case "delete-topic": {
                    String topic = a.req("topic");
                    admin.deleteTopics(List.of(topic)).all().get();
                    emit(obj("event", "deleted", "topic", topic));
                    return 0;
                }
                case "describe-cluster": {
                    boolean withOps = Boolean.parseBoolean(a.get("authorized-operations", "false"));
                    DescribeClusterResult r = admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(withOps));
                    List<Object> nodes = new ArrayList<>();
                    for (Node n : r.nodes().get()) nodes.add(nodeJson(n));
                    emit(obj("event", "cluster", "cluster_id", r.clusterId().get(), "controller", nodeJson(r.controller().get()),
                            "nodes", nodes, "authorized_operations", opNames(r.authorizedOperations().get())));
                    return 0;
                }
                case "describe-quorum": {
                    QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
                    List<Object> voters = new ArrayList<>();
                    for (QuorumInfo.ReplicaState r : q.voters()) voters.add(obj("id", r.replicaId(), "log_end_offset", r.logEndOffset()));
                    List<Object> observers = new ArrayList<>();
                    for (QuorumInfo.ReplicaState r : q.observers()) observers.add(obj("id", r.replicaId(), "log_end_offset", r.logEndOffset()));
                    emit(obj("event", "quorum", "leader", q.leaderId(), "epoch", q.leaderEpoch(), "high_watermark", q.highWatermark(),
                            "voters", voters, "observers", observers));
                    return 0;
                }
                case "describe-configs": {
                    ConfigResource res;
                    if (a.has("topic")) res = new ConfigResource(ConfigResource.Type.TOPIC, a.req("topic"));
                    else if (a.has("broker")) res = new ConfigResource(ConfigResource.Type.BROKER, a.req("broker"));
                    else if (a.has("group")) res = new ConfigResource(ConfigResource.Type.GROUP, a.req("group"));
                    else throw new UsageException("describe-configs needs --topic T, --broker ID or --group G");
                    Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
                    Map<String, Object> entries = new TreeMap<>();
                    for (ConfigEntry e : cfg.entries()) {
                        entries.put(e.name(), obj("value", e.value(), "source", e.source() == null ? null : e.source().name(),
                                "read_only", e.isReadOnly(), "sensitive", e.isSensitive()));
                    }
                    emit(obj("event", "configs", "resource_type", res.type().name(), "resource", res.name(), "configs", entries));
                    return 0;
                }
                case "create-acls": {
                    List<org.apache.kafka.common.acl.AclBinding> bindings = new ArrayList<>();
                    for (String text : a.all("acl")) bindings.add(aclBinding(text));
                    Map<org.apache.kafka.common.acl.AclBinding, org.apache.kafka.common.KafkaFuture<Void>> futures =
                            admin.createAcls(bindings).values();
                    List<Object> results = new ArrayList<>();
                    for (org.apache.kafka.common.acl.AclBinding b : bindings) {
                        try {
                            futures.get(b).get();
                            results.add(obj("acl", aclText(b), "error_class", null));
                        } catch (ExecutionException e) {
                            results.add(obj("acl", aclText(b), "error_class", e.getCause().getClass().getSimpleName(),
                                    "message", e.getCause().getMessage()));
                        }
                    }
                    emit(obj("event", "created-acls", "results", results));
                    return 0;
                }
                case "describe-acls": {
                    List<Object> acls = new ArrayList<>();
                    for (org.apache.kafka.common.acl.AclBinding b : admin.describeAcls(aclFilter(a.req("acl"))).values().get())
                        acls.add(aclText(b));
                    acls.sort(null);
                    emit(obj("event", "acls", "acls", acls));
                    return 0;
                }
                case "delete-acls": {
                    List<org.apache.kafka.common.acl.AclBindingFilter> filters = new ArrayList<>();
                    for (String text : a.all("acl")) filters.add(aclFilter(text));
                    Map<org.apache.kafka.common.acl.AclBindingFilter,
                            org.apache.kafka.common.KafkaFuture<org.apache.kafka.clients.admin.DeleteAclsResult.FilterResults>> futures =
                            admin.deleteAcls(filters).values();
                    List<Object> results = new ArrayList<>();
                    for (org.apache.kafka.common.acl.AclBindingFilter f : filters) {
                        List<Object> deleted = new ArrayList<>();
                        for (org.apache.kafka.clients.admin.DeleteAclsResult.FilterResult fr : futures.get(f).get().values())
                            deleted.add(aclText(fr.binding()));
                        deleted.sort(null);
                        results.add(deleted);
                    }
                    emit(obj("event", "deleted-acls", "results", results));
                    return 0;
                }
                case "alter-client-quotas": {
                    // --entity type=name (name <default>: the default entity) ..., --set key=value ..., --remove key ...
                    Map<String, String> ent = new HashMap<>();
                    for (String kv : a.all("entity")) {
                        int eq = kv.indexOf('=');
                        String n = kv.substring(eq + 1);
                        ent.put(kv.substring(0, eq), n.equals("<default>") ? null : n);
                    }
                    List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
                    for (String kv : a.all("set")) {
                        int eq = kv.indexOf('=');
                        ops.add(new ClientQuotaAlteration.Op(kv.substring(0, eq), Double.parseDouble(kv.substring(eq + 1))));
                    }
                    for (String k : a.all("remove")) ops.add(new ClientQuotaAlteration.Op(k, null));
                    admin.alterClientQuotas(List.of(new ClientQuotaAlteration(new ClientQuotaEntity(ent), ops)),
                            new AlterClientQuotasOptions().validateOnly(a.bool("validate-only", false))).all().get();
                    emit(obj("event", "altered"));
                    return 0;
                }
                case "describe-client-quotas": {
                    // --entity type=name (name <default>: the default; *: any), --strict true
                    List<ClientQuotaFilterComponent> comps = new ArrayList<>();
                    for (String kv : a.all("entity")) {
                        int eq = kv.indexOf('=');
                        String t = kv.substring(0, eq), n = kv.substring(eq + 1);
                        comps.add(n.equals("*") ? ClientQuotaFilterComponent.ofEntityType(t)
                                : n.equals("<default>") ? ClientQuotaFilterComponent.ofDefaultEntity(t)
                                : ClientQuotaFilterComponent.ofEntity(t, n));
                    }
                    ClientQuotaFilter f = a.bool("strict", false) ? ClientQuotaFilter.containsOnly(comps) : ClientQuotaFilter.contains(comps);
                    List<Object> out = new ArrayList<>();
                    for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : admin.describeClientQuotas(f).entities().get().entrySet()) {
                        Map<String, Object> names = new TreeMap<>();
                        for (Map.Entry<String, String> x : e.getKey().entries().entrySet()) names.put(x.getKey(), x.getValue() == null ? "<default>" : x.getValue());
                        out.add(obj("entity", names, "values", new TreeMap<>(e.getValue())));
                    }
                    emit(obj("event", "client-quotas", "entries", out));
                    return 0;
                }
                case "describe-features": {
                    org.apache.kafka.clients.admin.FeatureMetadata fm = admin.describeFeatures().featureMetadata().get();
                    Map<String, Object> supported = new TreeMap<>();
                    for (Map.Entry<String, org.apache.kafka.clients.admin.SupportedVersionRange> e : fm.supportedFeatures().entrySet())
                        supported.put(e.getKey(), List.of((int) e.getValue().minVersion(), (int) e.getValue().maxVersion()));
                    Map<String, Object> finalized = new TreeMap<>();
                    for (Map.Entry<String, org.apache.kafka.clients.admin.FinalizedVersionRange> e : fm.finalizedFeatures().entrySet())
                        finalized.put(e.getKey(), (int) e.getValue().maxVersionLevel());
                    emit(obj("event", "features", "supported", supported, "finalized", finalized,
                            "epoch", fm.finalizedFeaturesEpoch().orElse(null)));
                    return 0;
                }
                case "update-features": {
                    // --feature name=level ... --type upgrade|safe|unsafe --validate-only true
                    String type = a.get("type", "upgrade");
                    org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType ut = type.equals("safe")
                            ? org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.SAFE_DOWNGRADE
                            : type.equals("unsafe") ? org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UNSAFE_DOWNGRADE
                            : org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UPGRADE;
                    Map<String, org.apache.kafka.clients.admin.FeatureUpdate> updates = new LinkedHashMap<>();
                    for (String kv : a.all("feature")) {
                        int eq = kv.indexOf('=');
                        updates.put(kv.substring(0, eq), new org.apache.kafka.clients.admin.FeatureUpdate(
                                Short.parseShort(kv.substring(eq + 1)), ut));
                    }
                    Map<String, org.apache.kafka.common.KafkaFuture<Void>> futures = admin.updateFeatures(updates,
                            new org.apache.kafka.clients.admin.UpdateFeaturesOptions().validateOnly(a.bool("validate-only", false))).values();
                    Map<String, Object> results = new TreeMap<>();
                    for (Map.Entry<String, org.apache.kafka.common.KafkaFuture<Void>> e : futures.entrySet()) {
                        try {
                            e.getValue().get();
                            results.put(e.getKey(), obj("error_class", null));
                        } catch (ExecutionException ex) {
                            results.put(e.getKey(), obj("error_class", ex.getCause().getClass().getSimpleName(),
                                    "message", ex.getCause().getMessage()));
                        }
                    }
                    emit(obj("event", "updated-features", "results", results));
                    return 0;
                }
                case "list-config-resources": {
                    // --type TOPIC|BROKER|BROKER_LOGGER|GROUP|CLIENT_METRICS ... (none: every type)
                    Set<ConfigResource.Type> types = new java.util.HashSet<>();
                    for (String t : a.all("type")) types.add(ConfigResource.Type.valueOf(t));
                    Collection<ConfigResource> found = admin.listConfigResources(types,
                            new org.apache.kafka.clients.admin.ListConfigResourcesOptions()).all().get();
                    List<Object> out = new ArrayList<>();
                    for (ConfigResource r : found) out.add(r.type().name() + ":" + r.name());
                    out.sort(null);
                    emit(obj("event", "config-resources", "resources", out));
                    return 0;
                }
                case "create-token": {
                    // [--owner User:x] [--renewer User:y ...] [--max-life-ms N]  (KIP-48)
                    org.apache.kafka.clients.admin.CreateDelegationTokenOptions o =
                            new org.apache.kafka.clients.admin.CreateDelegationTokenOptions();
                    List<org.apache.kafka.common.security.auth.KafkaPrincipal> renewers = new ArrayList<>();
                    for (String r : a.all("renewer")) renewers.add(org.apache.kafka.common.utils.SecurityUtils.parseKafkaPrincipal(r));
                    o.renewers(renewers);
                    if (a.get("owner", null) != null) o.owner(org.apache.kafka.common.utils.SecurityUtils.parseKafkaPrincipal(a.get("owner", null)));
                    if (a.get("max-life-ms", null) != null) o.maxlifeTimeMs(Long.parseLong(a.get("max-life-ms", null)));
                    emit(tokenJson("token", admin.createDelegationToken(o).delegationToken().get()));
                    return 0;
                }
                case "renew-token": {
                    org.apache.kafka.clients.admin.RenewDelegationTokenOptions o = new org.apache.kafka.clients.admin.RenewDelegationTokenOptions();
                    if (a.get("period-ms", null) != null) o.renewTimePeriodMs(Long.parseLong(a.get("period-ms", null)));
                    long expiry = admin.renewDelegationToken(java.util.Base64.getDecoder().decode(a.req("hmac")), o).expiryTimestamp().get();
                    emit(obj("event", "renewed", "expiry_timestamp", expiry));
                    return 0;
                }
                case "expire-token": {
                    org.apache.kafka.clients.admin.ExpireDelegationTokenOptions o = new org.apache.kafka.clients.admin.ExpireDelegationTokenOptions();
                    if (a.get("period-ms", null) != null) o.expiryTimePeriodMs(Long.parseLong(a.get("period-ms", null)));
                    long expiry = admin.expireDelegationToken(java.util.Base64.getDecoder().decode(a.req("hmac")), o).expiryTimestamp().get();
                    emit(obj("event", "expired", "expiry_timestamp", expiry));
                    return 0;
                }
                case "describe-tokens": {
                    org.apache.kafka.clients.admin.DescribeDelegationTokenOptions o = new org.apache.kafka.clients.admin.DescribeDelegationTokenOptions();
                    if (!a.all("owner").isEmpty()) {
                        List<org.apache.kafka.common.security.auth.KafkaPrincipal> owners = new ArrayList<>();
                        for (String r : a.all("owner")) owners.add(org.apache.kafka.common.utils.SecurityUtils.parseKafkaPrincipal(r));
                        o.owners(owners);
                    }
                    List<Object> out = new ArrayList<>();
                    for (org.apache.kafka.common.security.token.delegation.DelegationToken t : admin.describeDelegationToken(o).delegationTokens().get())
                        out.add(tokenJson(null, t));
                    emit(obj("event", "tokens", "tokens", out));
                    return 0;
                }
                default:
                    throw new UsageException("unknown admin subcommand: " + sub);
            }
        }
    }

    /** A delegation token as JSON: id, hmac (base64), owner, requester, renewers, timestamps. */
    static Map<String, Object> tokenJson(String event, org.apache.kafka.common.security.token.delegation.DelegationToken t) {
        org.apache.kafka.common.security.token.delegation.TokenInformation i = t.tokenInfo();
        List<Object> renewers = new ArrayList<>();
        for (org.apache.kafka.common.security.auth.KafkaPrincipal p : i.renewers()) renewers.add(p.toString());
        Map<String, Object> m = new LinkedHashMap<>();
        if (event != null) m.put("event", event);
        m.put("token_id", i.tokenId());
        m.put("hmac", t.hmacAsBase64String());
        m.put("owner", i.owner().toString());
        m.put("requester", i.tokenRequester().toString());
        m.put("renewers", renewers);
        m.put("issue_timestamp", i.issueTimestamp());
        m.put("expiry_timestamp", i.expiryTimestamp());
        m.put("max_timestamp", i.maxTimestamp());
        return m;
    }

    /** "TYPE,name,PATTERN,principal,host,OPERATION,PERMISSION" (an empty field is null: any) -> a filter. */
    static org.apache.kafka.common.acl.AclBindingFilter aclFilter(String text) throws UsageException {
        String[] f = text.split(",", -1);
        if (f.length != 7) throw new UsageException("--acl wants TYPE,name,PATTERN,principal,host,OP,PERMISSION: " + text);
        return new org.apache.kafka.common.acl.AclBindingFilter(
                new org.apache.kafka.common.resource.ResourcePatternFilter(
                        org.apache.kafka.common.resource.ResourceType.fromString(f[0]), f[1].isEmpty() ? null : f[1],
                        org.apache.kafka.common.resource.PatternType.fromString(f[2])),
                new org.apache.kafka.common.acl.AccessControlEntryFilter(f[3].isEmpty() ? null : f[3],
                        f[4].isEmpty() ? null : f[4], org.apache.kafka.common.acl.AclOperation.fromString(f[5]),
                        org.apache.kafka.common.acl.AclPermissionType.fromString(f[6])));
    }

    static org.apache.kafka.common.acl.AclBinding aclBinding(String text) throws UsageException {
        org.apache.kafka.common.acl.AclBindingFilter f = aclFilter(text);
        return new org.apache.kafka.common.acl.AclBinding(
                new org.apache.kafka.common.resource.ResourcePattern(f.patternFilter().resourceType(),
                        f.patternFilter().name(), f.patternFilter().patternType()),
                new org.apache.kafka.common.acl.AccessControlEntry(f.entryFilter().principal(), f.entryFilter().host(),
                        f.entryFilter().operation(), f.entryFilter().permissionType()));
    }

    static String aclText(org.apache.kafka.common.acl.AclBinding b) {
        return String.join(",", b.pattern().resourceType().name(), b.pattern().name(), b.pattern().patternType().name(),
                b.entry().principal(), b.entry().host(), b.entry().operation().name(), b.entry().permissionType().name());
    }

    // ------------------------------------------------------------------ selftest

    static int selftest(Args a) throws Exception {
        byte[] data = new byte[64 * 1024];
        byte[] pat = RecordSpec.PATTERN.getBytes(StandardCharsets.UTF_8);
        for (int i = 0; i < data.length; i++) data[i] = (i % 997 == 0) ? (byte) i : pat[i % pat.length];
        boolean allOk = true;
        for (String codec : new String[] {"none", "gzip", "snappy", "lz4", "zstd"}) {
            Map<String, Object> o = obj("event", "selftest", "codec", codec);
            try {
                Compression comp = Compression.of(codec).build();
                // the client's own buffer classes, found by reflection: kafka-clients 4.4 moved them from
                // common.utils to common.utils.internals, and this driver runs with 4.3.1 and 4.4.0
                Class<?> bosClass = clientUtilsClass("ByteBufferOutputStream");
                Class<?> supplierClass = clientUtilsClass("BufferSupplier");
                Object bos = bosClass.getConstructor(int.class).newInstance(1024);
                try (OutputStream os = (OutputStream) Compression.class.getMethod("wrapForOutput", bosClass, byte.class)
                        .invoke(comp, bos, (byte) 2)) {
                    os.write(data);
                }
                ByteBuffer compressed = (ByteBuffer) bosClass.getMethod("buffer").invoke(bos);
                compressed.flip();
                int compressedSize = compressed.remaining();
                ByteArrayOutputStream back = new ByteArrayOutputStream();
                Object supplier = supplierClass.getMethod("create").invoke(null);
                try (InputStream is = (InputStream) Compression.class.getMethod("wrapForInput", ByteBuffer.class,
                        byte.class, supplierClass).invoke(comp, compressed, (byte) 2, supplier)) {
                    byte[] buf = new byte[8192];
                    int r;
                    while ((r = is.read(buf)) > 0) back.write(buf, 0, r);
                }
                boolean ok = Arrays.equals(data, back.toByteArray());
                allOk &= ok;
                o.put("ok", ok);
                o.put("compressed_bytes", compressedSize);
            } catch (Throwable t) {
                allOk = false;
                o.put("ok", false);
                o.put("error_class", t.getClass().getName());
                o.put("error", String.valueOf(t.getMessage()));
            }
            emit(o);
        }
        emit(obj("event", "done", "ok", allOk, "java_version", System.getProperty("java.version"),
                "client_version", clientUtilsClass("AppInfoParser").getMethod("getVersion").invoke(null)));
        return allOk ? 0 : 1;
    }

    /** A class of kafka-clients' org.apache.kafka.common.utils (up to 4.3) or common.utils.internals (4.4). */
    static Class<?> clientUtilsClass(String simpleName) throws ClassNotFoundException {
        try {
            return Class.forName("org.apache.kafka.common.utils." + simpleName);
        } catch (ClassNotFoundException e) {
            return Class.forName("org.apache.kafka.common.utils.internals." + simpleName);
        }
    }

    // ------------------------------------------------------------------ helpers

    static final class UsageException extends Exception {
        private static final long serialVersionUID = 1L;

        UsageException(String m) {
            super(m);
        }
    }

    /** --name value options; repeated options accumulate (for --config/--prop/--timestamp). */
    static final class Args {
        final Map<String, List<String>> m = new LinkedHashMap<>();

        static final Set<String> KNOWN = Set.of("bootstrap", "topic", "count", "acks", "compression", "idempotence",
                "linger-ms", "batch-size", "partitions", "base-ts", "ts-step", "tag", "binary", "nulls", "start-index",
                "sync", "delay-ms", "pad", "prop", "expect", "isolation", "timeout-ms", "fetch-max-wait-ms", "timestamp",
                "replication-factor", "config", "broker", "group", "internal", "authorized-operations", "acl",
                "entity", "set", "remove", "validate-only", "strict", "feature", "type",
                "owner", "renewer", "max-life-ms", "hmac", "period-ms");

        static Args parse(String[] argv, int from) throws UsageException {
            Args a = new Args();
            for (int i = from; i < argv.length; i++) {
                String s = argv[i];
                if (!s.startsWith("--")) throw new UsageException("unexpected argument: " + s);
                String name = s.substring(2);
                String val;
                int eq = name.indexOf('=');
                if (eq > 0 && !name.startsWith("prop") && !name.startsWith("config")) {
                    val = name.substring(eq + 1);
                    name = name.substring(0, eq);
                } else {
                    if (i + 1 >= argv.length) throw new UsageException("option --" + name + " needs a value");
                    val = argv[++i];
                }
                if (!KNOWN.contains(name)) throw new UsageException("unknown option --" + name);
                a.m.computeIfAbsent(name, k -> new ArrayList<>()).add(val);
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
            String v = get(k, null);
            if (v == null) return dflt;
            try {
                return Integer.parseInt(v);
            } catch (NumberFormatException e) {
                throw new UsageException("--" + k + " wants an integer, got " + v);
            }
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
