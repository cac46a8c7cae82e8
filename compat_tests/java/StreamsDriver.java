// StreamsDriver: Kafka Streams applications (kafka-streams 4.3.1, the classic group protocol) for
// compat_tests/test_streams.py and compat_tests/test_streams_cluster.py. One JSON object per line on stdout;
// the Streams client's own warnings (slf4j-simple) on stderr.
//
// Build/run (the tests' fixture does this):
//   javac -d compat_tests/java/classes/streams -cp '.cache/streams-4.3.1/*' compat_tests/java/StreamsDriver.java
//   java -Xmx256m -cp 'compat_tests/java/classes/streams:.cache/streams-4.3.1/*' StreamsDriver <app> [--option value ...]
//
// Apps (every key and value is a UTF-8 string; numbers are written in decimal):
//   wordcount  input lines -> words (lower case, split on non-word characters) -> groupBy word (repartition topic
//              "<application.id>-words-repartition") -> count (store "counts") -> output: key word, value count.
//   join       KTable(input, store "left") inner-join KTable(input2, store "right") -> output: key, value
//              "<left>+<right>"; a tombstone on either side whose key has a partner emits a tombstone.
//   suppress   input -> groupByKey -> tumbling windows of --window-ms with grace --grace-ms -> count (store
//              "window-counts") -> suppress(untilWindowCloses(unbounded)) -> output: key "<key>@<window start ms>",
//              value the window's final count.
//   sum        input (value a decimal number) -> groupByKey -> aggregate running sum (store "sums") -> output: key,
//              value the running sum. With --standby 1 (num.standby.replicas) it is the standby replicas app.
//
// Options: --bootstrap B --application-id A --input I [--input2 I2] --output O --state-dir D
//          [--guarantee exactly_once_v2|at_least_once] [--replication-factor 1] [--standby 0] [--threads 1]
//          [--window-ms 10000] [--grace-ms 0] [--prop k=v ...] (any StreamsConfig key, also prefixed ones such as
//          topic.min.insync.replicas=2 for internal topics).
// Defaults set here for tests: statestore.cache.max.bytes=0 (every update is forwarded: the counts run 1..n),
// session.timeout.ms=6000 and heartbeat.interval.ms=1500 (a killed instance is noticed quickly).
//
// Events:
//   {"event":"state","state":S,"old":S}                         KafkaStreams state transitions
//   {"event":"tasks","state":S,"active":[..],"standby":[..]}    the local tasks ("<subtopology>_<partition>"), on change
//   {"event":"restore_start","store":..,"topic":..,"partition":p,"start":o,"end":o}
//   {"event":"restored","store":..,"topic":..,"partition":p,"records":n}   state restored from a changelog
//   {"event":"standby_start","store":..,"topic":..,"partition":p,"start":o}  a standby replica began following
//   {"event":"error","error_class":..,"message":..}            an uncaught stream-thread exception (thread replaced)
//   {"event":"closed","clean":true|false}                       after SIGTERM (close with a 20 s bound)
// Exits 1 when the client reaches ERROR.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StandbyUpdateListener;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TaskId;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

public class StreamsDriver {

    static Map<String, List<String>> parse(String[] args, int from) {
        Map<String, List<String>> out = new HashMap<>();
        for (int i = from; i < args.length; i++) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("bad argument " + args[i]);
            }
            out.computeIfAbsent(args[i].substring(2), k -> new ArrayList<>()).add(args[++i]);
        }
        return out;
    }

    static String opt(Map<String, List<String>> o, String key, String dflt) {
        List<String> v = o.get(key);
        if (v == null) {
            if (dflt == null) throw new IllegalArgumentException("missing --" + key);
            return dflt;
        }
        return v.get(v.size() - 1);
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String list(Iterable<String> items) {
        StringBuilder b = new StringBuilder("[");
        for (String s : items) {
            if (b.length() > 1) b.append(',');
            b.append(q(s));
        }
        return b.append(']').toString();
    }

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    // ------------------------------------------------------------------------------------------ topologies
    static Topology wordcount(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((k, word) -> !word.isEmpty())
            .groupBy((k, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .mapValues(n -> Long.toString(n))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    static Topology join(String left, String right, String output) {
        StreamsBuilder b = new StreamsBuilder();
        KTable<String, String> l = b.table(left, Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("left")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
        KTable<String, String> r = b.table(right, Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("right")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
        l.join(r, (lv, rv) -> lv + "+" + rv)
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    static Topology suppress(String input, String output, long windowMs, long graceMs) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ofMillis(graceMs)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("window-counts")
                .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()).withName("final"))
            .toStream()
            .map((wk, n) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), Long.toString(n)))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    static Topology sum(String input, String output) {
        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .aggregate(() -> 0L, (k, v, total) -> total + Long.parseLong(v.trim()),
                Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("sums")
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
            .toStream()
            .mapValues(n -> Long.toString(n))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    // ------------------------------------------------------------------------------------------ main
    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: StreamsDriver wordcount|join|suppress|sum --option value ...");
            System.exit(2);
        }
        String app = args[0];
        Map<String, List<String>> o = parse(args, 1);
        String input = opt(o, "input", null), output = opt(o, "output", null);
        Topology topology;
        switch (app) {
            case "wordcount": topology = wordcount(input, output); break;
            case "join": topology = join(input, opt(o, "input2", null), output); break;
            case "suppress":
                topology = suppress(input, output, Long.parseLong(opt(o, "window-ms", "10000")),
                                    Long.parseLong(opt(o, "grace-ms", "0")));
                break;
            case "sum": topology = sum(input, output); break;
            default: throw new IllegalArgumentException("unknown app " + app);
        }

        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, opt(o, "bootstrap", null));
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, opt(o, "application-id", null));
        p.put(StreamsConfig.STATE_DIR_CONFIG, opt(o, "state-dir", null));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, opt(o, "guarantee", StreamsConfig.EXACTLY_ONCE_V2));
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, opt(o, "replication-factor", "1"));
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, opt(o, "standby", "0"));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, opt(o, "threads", "1"));
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put("session.timeout.ms", "6000");
        p.put("heartbeat.interval.ms", "1500");
        for (String kv : o.getOrDefault("prop", List.of())) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }

        KafkaStreams streams = new KafkaStreams(topology, p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, old) -> {
            emit("{\"event\":\"state\",\"state\":" + q(now.name()) + ",\"old\":" + q(old.name()) + "}");
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) done.countDown();
        });
        streams.setUncaughtExceptionHandler(e -> {
            Throwable t = e;
            while (t.getCause() != null && t.getCause() != t) t = t.getCause();
            emit("{\"event\":\"error\",\"error_class\":" + q(e.getClass().getSimpleName()) + ",\"root_class\":"
                 + q(t.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(e.getMessage())) + "}");
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                emit("{\"event\":\"restore_start\",\"store\":" + q(store) + ",\"topic\":" + q(tp.topic())
                     + ",\"partition\":" + tp.partition() + ",\"start\":" + start + ",\"end\":" + end + "}");
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                emit("{\"event\":\"restored\",\"store\":" + q(store) + ",\"topic\":" + q(tp.topic())
                     + ",\"partition\":" + tp.partition() + ",\"records\":" + total + "}");
            }
        });
        streams.setStandbyUpdateListener(new StandbyUpdateListener() {
            @Override
            public void onUpdateStart(TopicPartition tp, String store, long start) {
                emit("{\"event\":\"standby_start\",\"store\":" + q(store) + ",\"topic\":" + q(tp.topic())
                     + ",\"partition\":" + tp.partition() + ",\"start\":" + start + "}");
            }

            @Override
            public void onBatchLoaded(TopicPartition tp, String store, TaskId task, long batchEnd, long n, long end) {
            }

            @Override
            public void onUpdateSuspended(TopicPartition tp, String store, long stored, long end, SuspendReason why) {
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            boolean clean = streams.close(Duration.ofSeconds(20));
            emit("{\"event\":\"closed\",\"clean\":" + clean + "}");
        }));
        streams.start();

        String last = "";
        while (!done.await(200, java.util.concurrent.TimeUnit.MILLISECONDS)) {
            TreeSet<String> active = new TreeSet<>(), standby = new TreeSet<>();
            try {
                for (ThreadMetadata t : streams.metadataForLocalThreads()) {
                    for (TaskMetadata m : t.activeTasks()) active.add(m.taskId().toString());
                    for (TaskMetadata m : t.standbyTasks()) standby.add(m.taskId().toString());
                }
            } catch (RuntimeException e) {
                continue;  // the client is changing state
            }
            String state = streams.state().name();
            String now = "{\"event\":\"tasks\",\"state\":" + q(state) + ",\"active\":" + list(active)
                         + ",\"standby\":" + list(standby) + "}";
            if (!now.equals(last)) {
                emit(now);
                last = now;
            }
        }
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }
}
