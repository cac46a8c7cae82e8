// ShareDriver: share-group (KIP-932) commands around the Apache Kafka Java client (kafka-clients 4.3.1) for
// compat_tests/test_share_groups.py. One JSON object per line on stdout; diagnostics on stderr.
//
// Build/run (the `share_driver` fixture in test_share_groups.py does this):
//   javac -d compat_tests/java/classes -cp '.cache/jars/*' compat_tests/java/ShareDriver.java
//   java -cp 'compat_tests/java/classes:.cache/jars/*' ShareDriver <command> [--option value ...]
//
// Commands:
//   consume --bootstrap B --group G --topic T [--consumers 5] [--ack accept|release|reject]
//       K KafkaShareConsumers (one thread each) of group G subscribed to T. Records whose value starts with
//       "warm" are accepted; the others get --ack (explicit acknowledgement mode, commitSync after each poll;
//       without --ack the implicit mode accepts them). Prints {"event":"record","consumer":i,"offset":o,
//       "value":v,"delivery":d} per record and {"event":"ready"} once every consumer polled once. Stops
//       cleanly (close()) when stdin reaches EOF, then prints {"event":"closed"}.
//   take --bootstrap B --group G --topic T --prefix P --count N [--ack accept|release|reject] [--commit true|false]
//        [--max-poll-records M] [--acquire-mode batch_optimized|record_limit] [--halt true] [--extra-ms X]
//        [--timeout-ms 30000]
//       One KafkaShareConsumer in explicit acknowledgement mode polls until it got N records whose value starts
//       with P, acknowledging each with --ack (default accept; other records are accepted), then polls X ms more
//       the same way and closes. With --commit true (default) commitSync follows every poll that returned records;
//       with false the acknowledgements go out with close(). Prints {"event":"poll","count":k} per non-empty poll
//       (before its records), {"event":"record",...} per record and {"event":"closed"}. With --halt true the
//       process halts (no close(), like kill -9) right after the first poll holding a P record, printing
//       {"event":"halt"}. Not N records within the timeout: {"event":"error","error_class":"Timeout",...}, exit 1.
//   describe --bootstrap B --group G   -> {"event":"group","state":S,"epoch":E,"members":[{"id","epoch",
//                                          "client_id","partitions":["topic-p",...]}]}
//   list --bootstrap B                 -> {"event":"groups","groups":[{"id","state","type"}]}
//   offsets --bootstrap B --group G [--topic T [--partition P]]
//                                      -> {"event":"offsets","offsets":{"topic-p":{"start":S,"lag":L}}}
//                                         (listShareGroupOffsets of every partition with a state, or of T-P;
//                                         lag -1 when not given)
//   alter --bootstrap B --group G --topic T --partition P --offset O
//                                      -> {"event":"altered"} (alterShareGroupOffsets)
//   delete-offsets --bootstrap B --group G --topic T -> {"event":"deleted-offsets"} (deleteShareGroupOffsets)
// Errors print {"event":"error","error_class":...,"message":...} and exit 1.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareDriver {

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            System.err.println("usage: ShareDriver <consume|describe|list> ...");
            System.exit(2);
        }
        Map<String, String> opts = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            opts.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        try {
            switch (argv[0]) {
                case "consume": consume(opts); break;
                case "take": take(opts); break;
                case "describe": describe(opts); break;
                case "list": list(opts); break;
                case "offsets": offsets(opts); break;
                case "alter": alter(opts); break;
                case "delete-offsets": deleteOffsets(opts); break;
                default:
                    System.err.println("unknown command " + argv[0]);
                    System.exit(2);
            }
        } catch (Exception e) {
            Throwable c = e.getCause() != null ? e.getCause() : e;
            emit("{\"event\":\"error\",\"error_class\":" + q(c.getClass().getSimpleName()) + ",\"message\":"
                 + q(String.valueOf(c.getMessage())) + "}");
            System.exit(1);
        }
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }

    static void consume(Map<String, String> opts) throws Exception {
        int n = Integer.parseInt(opts.getOrDefault("consumers", "1"));
        String ack = opts.get("ack");
        AcknowledgeType type = ack == null ? null : AcknowledgeType.valueOf(ack.toUpperCase());
        AtomicBoolean stop = new AtomicBoolean(false);
        CountDownLatch polled = new CountDownLatch(n);
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
        for (int i = 0; i < n; i++) {
            final int idx = i;
            Thread t = new Thread(() -> {
                Properties p = new Properties();
                p.put("bootstrap.servers", opts.get("bootstrap"));
                p.put("group.id", opts.get("group"));
                p.put("client.id", "share-" + idx);
                if (type != null) {
                    p.put("share.acknowledgement.mode", "explicit");
                }
                try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(
                        p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    c.subscribe(Collections.singletonList(opts.get("topic")));
                    boolean first = true;
                    while (!stop.get()) {
                        ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(300));
                        if (first) {
                            polled.countDown();
                            first = false;
                        }
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            String v = new String(r.value(), StandardCharsets.UTF_8);
                            int delivery = r.deliveryCount().map(Short::intValue).orElse(-1);
                            emit("{\"event\":\"record\",\"consumer\":" + idx + ",\"offset\":" + r.offset()
                                 + ",\"value\":" + q(v) + ",\"delivery\":" + delivery + "}");
                            if (type != null) {
                                c.acknowledge(r, v.startsWith("warm") ? AcknowledgeType.ACCEPT : type);
                            }
                        }
                        if (type != null && !records.isEmpty()) {
                            c.commitSync(Duration.ofSeconds(10));
                        }
                    }
                } catch (Throwable e) {
                    failures.add(e);
                    polled.countDown();
                }
            }, "share-consumer-" + i);
            t.start();
            threads.add(t);
        }
        polled.await();
        emit("{\"event\":\"ready\"}");
        while (System.in.read() >= 0) {
            // until EOF
        }
        stop.set(true);
        for (Thread t : threads) {
            t.join(30000);
        }
        if (!failures.isEmpty()) {
            throw new RuntimeException(failures.get(0));
        }
        emit("{\"event\":\"closed\"}");
    }

    static void take(Map<String, String> opts) throws Exception {
        String prefix = opts.get("prefix");
        int count = Integer.parseInt(opts.get("count"));
        AcknowledgeType type = AcknowledgeType.valueOf(opts.getOrDefault("ack", "accept").toUpperCase());
        boolean commit = Boolean.parseBoolean(opts.getOrDefault("commit", "true"));
        boolean halt = Boolean.parseBoolean(opts.getOrDefault("halt", "false"));
        long extraMs = Long.parseLong(opts.getOrDefault("extra-ms", "0"));
        long deadline = System.currentTimeMillis() + Long.parseLong(opts.getOrDefault("timeout-ms", "30000"));
        Properties p = new Properties();
        p.put("bootstrap.servers", opts.get("bootstrap"));
        p.put("group.id", opts.get("group"));
        p.put("share.acknowledgement.mode", "explicit");
        if (opts.containsKey("max-poll-records")) {
            p.put("max.poll.records", opts.get("max-poll-records"));
        }
        if (opts.containsKey("acquire-mode")) {
            p.put("share.acquire.mode", opts.get("acquire-mode"));
        }
        int got = 0;
        long stopAt = Long.MAX_VALUE;
        try (KafkaShareConsumer<byte[], byte[]> c = new KafkaShareConsumer<>(
                p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            c.subscribe(Collections.singletonList(opts.get("topic")));
            while (System.currentTimeMillis() < stopAt) {
                if (got < count && System.currentTimeMillis() > deadline) {
                    emit("{\"event\":\"error\",\"error_class\":\"Timeout\",\"message\":"
                         + q("got " + got + " of " + count + " records") + "}");
                    System.exit(1);
                }
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(300));
                if (records.isEmpty()) {
                    continue;
                }
                emit("{\"event\":\"poll\",\"count\":" + records.count() + "}");
                boolean mine = false;
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String v = new String(r.value(), StandardCharsets.UTF_8);
                    int delivery = r.deliveryCount().map(Short::intValue).orElse(-1);
                    emit("{\"event\":\"record\",\"offset\":" + r.offset() + ",\"value\":" + q(v)
                         + ",\"delivery\":" + delivery + "}");
                    if (v.startsWith(prefix)) {
                        mine = true;
                        got++;
                    }
                    c.acknowledge(r, v.startsWith(prefix) ? type : AcknowledgeType.ACCEPT);
                }
                if (halt && mine) {
                    emit("{\"event\":\"halt\"}");
                    Runtime.getRuntime().halt(0);
                }
                if (commit) {
                    c.commitSync(Duration.ofSeconds(10));
                }
                if (got >= count && stopAt == Long.MAX_VALUE) {
                    stopAt = System.currentTimeMillis() + extraMs;
                }
            }
        }
        emit("{\"event\":\"closed\"}");
    }

    static Admin admin(Map<String, String> opts) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
        return Admin.create(p);
    }

    static void describe(Map<String, String> opts) throws Exception {
        try (Admin a = admin(opts)) {
            String group = opts.get("group");
            ShareGroupDescription d = a.describeShareGroups(Collections.singletonList(group))
                .describedGroups().get(group).get();
            StringBuilder members = new StringBuilder("[");
            for (ShareMemberDescription m : d.members()) {
                if (members.length() > 1) {
                    members.append(',');
                }
                StringBuilder parts = new StringBuilder("[");
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    if (parts.length() > 1) {
                        parts.append(',');
                    }
                    parts.append(q(tp.topic() + "-" + tp.partition()));
                }
                parts.append(']');
                members.append("{\"id\":").append(q(m.consumerId())).append(",\"epoch\":").append(m.memberEpoch())
                    .append(",\"client_id\":").append(q(m.clientId())).append(",\"partitions\":").append(parts)
                    .append('}');
            }
            members.append(']');
            emit("{\"event\":\"group\",\"state\":" + q(d.groupState().toString()) + ",\"epoch\":" + d.groupEpoch()
                 + ",\"members\":" + members + "}");
        }
    }

    static void list(Map<String, String> opts) throws Exception {
        try (Admin a = admin(opts)) {
            StringBuilder out = new StringBuilder("[");
            for (GroupListing g : a.listGroups(new ListGroupsOptions()).all().get()) {
                if (out.length() > 1) {
                    out.append(',');
                }
                out.append("{\"id\":").append(q(g.groupId())).append(",\"state\":")
                    .append(q(g.groupState().map(Object::toString).orElse(""))).append(",\"type\":")
                    .append(q(g.type().map(Object::toString).orElse(""))).append('}');
            }
            emit("{\"event\":\"groups\",\"groups\":" + out.append(']') + "}");
        }
    }

    static void offsets(Map<String, String> opts) throws Exception {
        try (Admin a = admin(opts)) {
            String group = opts.get("group");
            ListShareGroupOffsetsSpec spec = new ListShareGroupOffsetsSpec();
            if (opts.containsKey("topic")) {
                spec.topicPartitions(Collections.singletonList(
                    new TopicPartition(opts.get("topic"), Integer.parseInt(opts.getOrDefault("partition", "0")))));
            }
            Map<TopicPartition, SharePartitionOffsetInfo> got = a.listShareGroupOffsets(
                Collections.singletonMap(group, spec)).partitionsToOffsetInfo(group).get();
            StringBuilder out = new StringBuilder("{");
            for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : got.entrySet()) {
                if (out.length() > 1) {
                    out.append(',');
                }
                SharePartitionOffsetInfo info = e.getValue();
                out.append(q(e.getKey().topic() + "-" + e.getKey().partition())).append(":{\"start\":")
                    .append(info == null ? -1 : info.startOffset()).append(",\"lag\":")
                    .append(info == null ? -1 : info.lag().orElse(-1L)).append('}');
            }
            emit("{\"event\":\"offsets\",\"offsets\":" + out.append('}') + "}");
        }
    }

    static void alter(Map<String, String> opts) throws Exception {
        try (Admin a = admin(opts)) {
            TopicPartition tp = new TopicPartition(opts.get("topic"), Integer.parseInt(opts.get("partition")));
            a.alterShareGroupOffsets(opts.get("group"),
                Collections.singletonMap(tp, Long.parseLong(opts.get("offset")))).all().get();
            emit("{\"event\":\"altered\"}");
        }
    }

    static void deleteOffsets(Map<String, String> opts) throws Exception {
        try (Admin a = admin(opts)) {
            a.deleteShareGroupOffsets(opts.get("group"), Collections.singleton(opts.get("topic"))).all().get();
            emit("{\"event\":\"deleted-offsets\"}");
        }
    }
}
