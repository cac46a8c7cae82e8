// GroupDriver: consumer-group commands around the Apache Kafka Java client (kafka-clients 4.3.1) for
// compat_tests/test_groups.py. One JSON object per line on stdout; diagnostics on stderr.
//
// Build/run (the `group_driver` fixture in test_groups.py does this):
//   javac -d compat_tests/java/classes -cp '.cache/jars/*' compat_tests/java/GroupDriver.java
//   java -cp 'compat_tests/java/classes:.cache/jars/*' GroupDriver <command> [--option value ...]
//
// Commands:
//   member --bootstrap B --group G --topics T1[,T2] [--instance-id I] [--session-timeout-ms 6000]
//          [--heartbeat-interval-ms 500] [--assignor range|roundrobin|sticky|cooperative-sticky]
//          [--metadata M] [--client-id C] [--group-protocol classic|consumer] [--pattern REGEX]
//       A group member: subscribe (to the topics, or to --pattern); for every poll, print each record, then
//       commitSync the
//       next offsets with metadata M and print the commit. Stops cleanly (close(), which leaves the group
//       unless static) when stdin reaches EOF. With --group-protocol consumer (KIP-848) the assignor is the
//       server-side one (group.remote.assignor: uniform|range; other names: the broker's default) and the
//       session timeout / heartbeat interval are the broker's. Events as compat_tests/test_groups_member.py
//       prints them:
//       assigned / revoked / record / committed / commit_failed / error / closed.
//   list-groups --bootstrap B                      -> {"event":"groups","groups":[{group_id,state,type}]}
//   describe-group --bootstrap B --group G         -> {"event":"group","state","assignor","members":[...]}
//                                                     (members with "epoch" and "target" for consumer groups)
//   group-offsets --bootstrap B --group G          -> {"event":"offsets","offsets":[[topic,p,offset,metadata]]}
//   delete-offsets --bootstrap B --group G --topic T --partitions 0,1
//                                                  -> {"event":"deleted-offsets","errors":{"p":null|class}}
//   delete-group --bootstrap B --group G           -> {"event":"deleted-group","error":null|class}
// Errors print {"event":"error","error_class":...,"message":...} and exit 1.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DeleteConsumerGroupOffsetsResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupDriver {

    public static void main(String[] argv) {
        if (argv.length == 0) {
            System.err.println("usage: GroupDriver <member|list-groups|describe-group|group-offsets|delete-offsets|delete-group> ...");
            System.exit(2);
        }
        Map<String, String> opts = parse(Arrays.copyOfRange(argv, 1, argv.length));
        try {
            switch (argv[0]) {
                case "member": member(opts); break;
                case "list-groups": listGroups(opts); break;
                case "describe-group": describeGroup(opts); break;
                case "group-offsets": groupOffsets(opts); break;
                case "delete-offsets": deleteOffsets(opts); break;
                case "delete-group": deleteGroup(opts); break;
                default:
                    System.err.println("unknown command " + argv[0]);
                    System.exit(2);
            }
        } catch (Throwable t) {
            Throwable c = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
            emit("{\"event\":\"error\",\"error_class\":" + str(c.getClass().getName()) + ",\"message\":" + str(String.valueOf(c.getMessage())) + "}");
            System.exit(1);
        }
        System.exit(0);
    }

    static Map<String, String> parse(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) throw new IllegalArgumentException("expected --option, got " + args[i]);
            m.put(args[i].substring(2), args[i + 1]);
        }
        return m;
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String str(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch)); else b.append(ch);
            }
        }
        return b.append('"').toString();
    }

    static String partitions(Collection<TopicPartition> parts) {
        List<String> items = new ArrayList<>();
        for (TopicPartition tp : parts) items.add("[" + str(tp.topic()) + "," + tp.partition() + "]");
        return "[" + String.join(",", items) + "]";
    }

    static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    // ------------------------------------------------------------------------------------------ member

    static void member(Map<String, String> o) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("bootstrap"));
        p.put(ConsumerConfig.GROUP_ID_CONFIG, o.get("group"));
        boolean consumerProtocol = "consumer".equals(o.getOrDefault("group-protocol", "classic"));
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, consumerProtocol ? "consumer" : "classic");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (!consumerProtocol) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, o.getOrDefault("session-timeout-ms", "6000"));
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, o.getOrDefault("heartbeat-interval-ms", "500"));
        }
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, o.getOrDefault("client-id", "compat-group-member"));
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        String assignor = o.getOrDefault("assignor", "range");
        if (consumerProtocol) {
            if (assignor.equals("uniform") || assignor.equals("range")) p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
        } else {
            String cls;
            switch (assignor) {
                case "range": cls = "org.apache.kafka.clients.consumer.RangeAssignor"; break;
                case "roundrobin": cls = "org.apache.kafka.clients.consumer.RoundRobinAssignor"; break;
                case "sticky": cls = "org.apache.kafka.clients.consumer.StickyAssignor"; break;
                case "cooperative-sticky": cls = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"; break;
                default: throw new IllegalArgumentException("unknown assignor " + assignor);
            }
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, cls);
        }
        if (o.containsKey("instance-id")) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, o.get("instance-id"));
        String metadata = o.getOrDefault("metadata", "");
        List<String> topics = Arrays.asList(o.getOrDefault("topics", "").split(","));

        AtomicBoolean stop = new AtomicBoolean(false);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        Thread stdin = new Thread(() -> {
            try {
                byte[] buf = new byte[256];
                while (System.in.read(buf) >= 0) { }
            } catch (Exception e) {
                // treat as EOF
            }
            stop.set(true);
            consumer.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                emit("{\"event\":\"revoked\",\"t\":" + now() + ",\"partitions\":" + partitions(parts) + "}");
            }

            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                emit("{\"event\":\"assigned\",\"t\":" + now() + ",\"partitions\":" + partitions(parts) + "}");
            }

            public void onPartitionsLost(Collection<TopicPartition> parts) {
                emit("{\"event\":\"revoked\",\"lost\":true,\"t\":" + now() + ",\"partitions\":" + partitions(parts) + "}");
            }
        };
        if (o.containsKey("pattern") && consumerProtocol) {
            consumer.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern(o.get("pattern")), listener);
        } else if (o.containsKey("pattern")) {
            consumer.subscribe(java.util.regex.Pattern.compile(o.get("pattern")), listener);
        } else {
            consumer.subscribe(topics, listener);
        }
        try {
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = consumer.poll(Duration.ofMillis(100));
                } catch (WakeupException e) {
                    break;
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = r.value() == null ? "null" : str(new String(r.value(), java.nio.charset.StandardCharsets.UTF_8));
                    emit("{\"event\":\"record\",\"t\":" + now() + ",\"topic\":" + str(r.topic()) + ",\"partition\":"
                         + r.partition() + ",\"offset\":" + r.offset() + ",\"value\":" + value + "}");
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1, metadata));
                }
                if (!next.isEmpty()) {
                    try {
                        consumer.commitSync(next);
                        List<String> items = new ArrayList<>();
                        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : next.entrySet()) {
                            items.add("[" + str(e.getKey().topic()) + "," + e.getKey().partition() + "," + e.getValue().offset() + "]");
                        }
                        emit("{\"event\":\"committed\",\"t\":" + now() + ",\"offsets\":[" + String.join(",", items) + "]}");
                    } catch (WakeupException e) {
                        break;
                    } catch (Exception e) {
                        emit("{\"event\":\"commit_failed\",\"t\":" + now() + ",\"error\":" + str(e.getClass().getName() + ": " + e.getMessage()) + "}");
                    }
                }
            }
        } finally {
            consumer.close(Duration.ofSeconds(10));
        }
        emit("{\"event\":\"closed\",\"t\":" + now() + "}");
    }

    // ------------------------------------------------------------------------------------------ admin

    static Admin admin(Map<String, String> o) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("bootstrap"));
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        return Admin.create(p);
    }

    static void listGroups(Map<String, String> o) throws Exception {
        try (Admin a = admin(o)) {
            List<String> items = new ArrayList<>();
            for (GroupListing g : a.listGroups().all().get()) {
                items.add("{\"group_id\":" + str(g.groupId()) + ",\"state\":" + str(g.groupState().map(Object::toString).orElse(null))
                          + ",\"type\":" + str(g.type().map(Object::toString).orElse(null)) + ",\"protocol\":" + str(g.protocol()) + "}");
            }
            emit("{\"event\":\"groups\",\"groups\":[" + String.join(",", items) + "]}");
        }
    }

    static void describeGroup(Map<String, String> o) throws Exception {
        try (Admin a = admin(o)) {
            String group = o.get("group");
            ConsumerGroupDescription d = a.describeConsumerGroups(List.of(group)).all().get().get(group);
            List<String> members = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                members.add("{\"member_id\":" + str(m.consumerId()) + ",\"instance_id\":" + str(m.groupInstanceId().orElse(null))
                            + ",\"client_id\":" + str(m.clientId()) + ",\"host\":" + str(m.host())
                            + ",\"partitions\":" + partitions(m.assignment().topicPartitions())
                            + ",\"epoch\":" + m.memberEpoch().map(String::valueOf).orElse("null")
                            + ",\"target\":" + m.targetAssignment().map(t -> partitions(t.topicPartitions())).orElse("null") + "}");
            }
            emit("{\"event\":\"group\",\"group_id\":" + str(d.groupId()) + ",\"state\":" + str(d.groupState().toString())
                 + ",\"type\":" + str(d.type().toString()) + ",\"assignor\":" + str(d.partitionAssignor())
                 + ",\"simple\":" + d.isSimpleConsumerGroup()
                 + ",\"group_epoch\":" + d.groupEpoch().map(String::valueOf).orElse("null")
                 + ",\"assignment_epoch\":" + d.targetAssignmentEpoch().map(String::valueOf).orElse("null")
                 + ",\"members\":[" + String.join(",", members) + "]}");
        }
    }

    static void groupOffsets(Map<String, String> o) throws Exception {
        try (Admin a = admin(o)) {
            Map<TopicPartition, OffsetAndMetadata> offsets = a.listConsumerGroupOffsets(o.get("group")).partitionsToOffsetAndMetadata().get();
            List<String> items = new ArrayList<>();
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                if (e.getValue() == null) continue;
                items.add("[" + str(e.getKey().topic()) + "," + e.getKey().partition() + "," + e.getValue().offset() + "," + str(e.getValue().metadata()) + "]");
            }
            emit("{\"event\":\"offsets\",\"offsets\":[" + String.join(",", items) + "]}");
        }
    }

    static void deleteOffsets(Map<String, String> o) throws Exception {
        try (Admin a = admin(o)) {
            java.util.Set<TopicPartition> parts = new java.util.HashSet<>();
            for (String s : o.get("partitions").split(",")) parts.add(new TopicPartition(o.get("topic"), Integer.parseInt(s)));
            DeleteConsumerGroupOffsetsResult r = a.deleteConsumerGroupOffsets(o.get("group"), parts);
            List<String> items = new ArrayList<>();
            for (TopicPartition tp : parts) {
                String err = "null";
                try {
                    r.partitionResult(tp).get();
                } catch (ExecutionException e) {
                    err = str(e.getCause().getClass().getSimpleName());
                }
                items.add(str(String.valueOf(tp.partition())) + ":" + err);
            }
            emit("{\"event\":\"deleted-offsets\",\"errors\":{" + String.join(",", items) + "}}");
        }
    }

    static void deleteGroup(Map<String, String> o) throws Exception {
        try (Admin a = admin(o)) {
            String err = "null";
            try {
                a.deleteConsumerGroups(List.of(o.get("group"))).all().get();
            } catch (ExecutionException e) {
                err = str(e.getCause().getClass().getSimpleName());
            }
            emit("{\"event\":\"deleted-group\",\"error\":" + err + "}");
        }
    }
}
