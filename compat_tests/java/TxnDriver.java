// TxnDriver: transactional programs on the real Apache Kafka Java client (kafka-clients 4.3.1) for
// compat_tests/test_transactions.py. One JSON object per line on stdout; diagnostics on stderr.
//
// Build/run (the test's fixture does this):
//   javac -d compat_tests/java/classes -cp '.cache/jars/*' compat_tests/java/TxnDriver.java
//   java -cp 'compat_tests/java/classes:.cache/jars/*' TxnDriver <command> [--option value ...]
//
// Commands:
//   transform  --bootstrap B --input I --output O --group G --txn-id T [--max-per-txn 20] [--idle-ms 6000]
//       The consume-transform-produce loop: a read_committed consumer in group G (manual commits) and a
//       transactional producer; per poll: beginTransaction, one output record per input record (key
//       "<partition>:<offset>" of the input, value = the input value), sendOffsetsToTransaction with the
//       consumer's group metadata, commitTransaction. An abortable error aborts and rewinds the consumer to
//       the committed offsets. Prints {"event":"committed","records":n,"total":t} per transaction and exits 0
//       after --idle-ms without input while it has partitions assigned.
//   produce    --bootstrap B --topic T --txn-id X --transactions N --per-txn M [--abort-every 0]
//              [--partitions P] [--timeout-ms 60000] [--prop k=v ...]
//       N transactions of M records spread round-robin over P partitions, values "t<i>-r<j>"; transaction i
//       is aborted when abort-every > 0 and i % abort-every == abort-every - 1. Prints
//       {"event":"txn","txn":i,"result":"commit"|"abort","offsets":[[partition,offset],...]} per transaction.
//   fence      --bootstrap B --topic T --txn-id X
//       Producer A opens a transaction and sends one record; producer B with the same transactional.id
//       calls initTransactions (fencing A) and commits one record; then A sends again and tries to commit.
//       Prints {"event":"fence","a_send_error":...,"a_commit_error":...,"b_committed":true}.
//   open       --bootstrap B --topic T --txn-id X --count N --txn-timeout-ms MS --wait-ms W
//       Opens a transaction with transaction.timeout.ms = MS, sends N records, flushes, prints
//       {"event":"sent"}, sleeps W ms, then tries to commit: {"event":"open","commit_error":...}.
//   admin      --bootstrap B --topic T --txn-id X
//       A producer opens a transaction with 3 records in partition 0 and stays open; the Admin client then
//       lists and describes the transaction, describes the partition's producers and aborts the
//       transaction with abortTransaction (WriteTxnMarkers to the partition). Prints {"event":"admin",...}.
//
// Errors print {"event":"error","error_class":...,"message":...} and exit 1.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnDriver {

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

    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String errorClass(Throwable t) {
        return t == null ? null : t.getClass().getSimpleName();
    }

    static Throwable root(Throwable t) {
        while (t.getCause() != null && t.getCause() != t && !(t instanceof ProducerFencedException)) {
            if (t instanceof KafkaException && !(t.getClass() == KafkaException.class)) break;
            t = t.getCause();
        }
        return t;
    }

    static Properties producerProps(Map<String, List<String>> o, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, opt(o, "bootstrap", null));
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, opt(o, "max-block-ms", "30000"));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, opt(o, "txn-timeout-ms", "60000"));
        for (String kv : o.getOrDefault("prop", List.of())) {
            int eq = kv.indexOf('=');
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return p;
    }

    // ------------------------------------------------------------------------------------------ transform
    static int transform(Map<String, List<String>> o) {
        String input = opt(o, "input", null), output = opt(o, "output", null);
        int maxPerTxn = Integer.parseInt(opt(o, "max-per-txn", "20"));
        long idleMs = Long.parseLong(opt(o, "idle-ms", "6000"));
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opt(o, "bootstrap", null));
        c.put(ConsumerConfig.GROUP_ID_CONFIG, opt(o, "group", null));
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, String.valueOf(maxPerTxn));
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        c.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        long total = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
             KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(o, opt(o, "txn-id", null)))) {
            producer.initTransactions();
            emit("{\"event\":\"ready\"}");
            consumer.subscribe(List.of(input));
            long lastInput = System.currentTimeMillis();
            while (System.currentTimeMillis() - lastInput < idleMs) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (consumer.assignment().isEmpty()) lastInput = System.currentTimeMillis();  // still joining
                if (records.isEmpty()) continue;
                lastInput = System.currentTimeMillis();
                producer.beginTransaction();
                try {
                    Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(output, r.partition() + ":" + r.offset(), r.value()));
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                    producer.commitTransaction();
                    total += records.count();
                    emit("{\"event\":\"committed\",\"records\":" + records.count() + ",\"total\":" + total + "}");
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                    throw e;  // fatal: another instance took over, or the producer cannot go on
                } catch (KafkaException e) {
                    emit("{\"event\":\"aborted\",\"error_class\":" + q(errorClass(root(e))) + ",\"message\":"
                         + q(String.valueOf(e.getMessage())) + "}");
                    producer.abortTransaction();
                    rewind(consumer);
                }
            }
            emit("{\"event\":\"done\",\"total\":" + total + "}");
            return 0;
        }
    }

    static void rewind(KafkaConsumer<String, String> consumer) {
        Set<TopicPartition> assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata om = committed.get(tp);
            if (om != null) consumer.seek(tp, om.offset());
            else consumer.seekToBeginning(List.of(tp));
        }
    }

    // ------------------------------------------------------------------------------------------ produce
    static int produce(Map<String, List<String>> o) throws Exception {
        String topic = opt(o, "topic", null);
        int txns = Integer.parseInt(opt(o, "transactions", null));
        int perTxn = Integer.parseInt(opt(o, "per-txn", null));
        int abortEvery = Integer.parseInt(opt(o, "abort-every", "0"));
        int partitions = Integer.parseInt(opt(o, "partitions", "1"));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(o, opt(o, "txn-id", null)))) {
            producer.initTransactions();
            emit("{\"event\":\"ready\"}");
            for (int i = 0; i < txns; i++) {
                producer.beginTransaction();
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                for (int j = 0; j < perTxn; j++) {
                    futures.add(producer.send(new ProducerRecord<>(topic, j % partitions, "t" + i, "t" + i + "-r" + j)));
                }
                producer.flush();
                StringBuilder offs = new StringBuilder("[");
                for (Future<RecordMetadata> f : futures) {
                    RecordMetadata md = f.get();
                    if (offs.length() > 1) offs.append(',');
                    offs.append('[').append(md.partition()).append(',').append(md.offset()).append(']');
                }
                offs.append(']');
                boolean abort = abortEvery > 0 && i % abortEvery == abortEvery - 1;
                if (abort) producer.abortTransaction();
                else producer.commitTransaction();
                emit("{\"event\":\"txn\",\"txn\":" + i + ",\"result\":\"" + (abort ? "abort" : "commit")
                     + "\",\"offsets\":" + offs + "}");
            }
            emit("{\"event\":\"done\"}");
            return 0;
        }
    }

    // ------------------------------------------------------------------------------------------ fence
    static int fence(Map<String, List<String>> o) throws Exception {
        String topic = opt(o, "topic", null), txnId = opt(o, "txn-id", null);
        Properties pa = producerProps(o, txnId);
        pa.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        KafkaProducer<String, String> a = new KafkaProducer<>(pa);
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(topic, 0, "a", "zombie-1")).get();
        emit("{\"event\":\"a_sent\"}");
        try (KafkaProducer<String, String> b = new KafkaProducer<>(producerProps(o, txnId))) {
            b.initTransactions();
            b.beginTransaction();
            b.send(new ProducerRecord<>(topic, 0, "b", "fencer-1")).get();
            b.commitTransaction();
        }
        emit("{\"event\":\"b_committed\"}");
        String sendError = null, commitError = null;
        try {
            a.send(new ProducerRecord<>(topic, 0, "a", "zombie-2")).get();
        } catch (Exception e) {
            sendError = errorClass(e.getCause() != null ? e.getCause() : e);
        }
        try {
            a.commitTransaction();
        } catch (Exception e) {
            commitError = errorClass(e);
        }
        try {
            a.close(Duration.ofSeconds(5));
        } catch (Exception e) {
            // the fenced producer may refuse to close cleanly
        }
        emit("{\"event\":\"fence\",\"a_send_error\":" + q(sendError) + ",\"a_commit_error\":" + q(commitError)
             + ",\"b_committed\":true}");
        return 0;
    }

    // ------------------------------------------------------------------------------------------ open
    static int open(Map<String, List<String>> o) throws Exception {
        String topic = opt(o, "topic", null);
        int count = Integer.parseInt(opt(o, "count", "5"));
        long waitMs = Long.parseLong(opt(o, "wait-ms", null));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(o, opt(o, "txn-id", null)))) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int j = 0; j < count; j++) producer.send(new ProducerRecord<>(topic, 0, "open", "open-" + j));
            producer.flush();
            emit("{\"event\":\"sent\"}");
            Thread.sleep(waitMs);
            String commitError = null;
            try {
                producer.commitTransaction();
            } catch (Exception e) {
                commitError = errorClass(e);
            }
            emit("{\"event\":\"open\",\"commit_error\":" + q(commitError) + "}");
            return 0;
        }
    }

    // ------------------------------------------------------------------------------------------ admin
    static int admin(Map<String, List<String>> o) throws Exception {
        String topic = opt(o, "topic", null), txnId = opt(o, "txn-id", null);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opt(o, "bootstrap", null));
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(o, txnId));
             Admin admin = Admin.create(ap)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int j = 0; j < 3; j++) producer.send(new ProducerRecord<>(topic, 0, "h", "hanging-" + j));
            producer.flush();
            StringBuilder listed = new StringBuilder("[");
            for (TransactionListing l : admin.listTransactions().all().get()) {
                if (!l.transactionalId().equals(txnId)) continue;
                listed.append("{\"id\":").append(q(l.transactionalId())).append(",\"producer_id\":")
                      .append(l.producerId()).append(",\"state\":").append(q(l.state().toString())).append('}');
            }
            listed.append(']');
            TransactionDescription d = admin.describeTransactions(List.of(txnId)).all().get().get(txnId);
            List<ProducerState> producers = admin.describeProducers(List.of(tp)).all().get().get(tp).activeProducers();
            ProducerState ps = producers.get(0);
            admin.abortTransaction(new AbortTransactionSpec(tp, ps.producerId(), (short) ps.producerEpoch(),
                                                            ps.coordinatorEpoch().orElse(-1))).all().get();
            emit("{\"event\":\"admin\",\"listed\":" + listed + ",\"state\":" + q(d.state().toString())
                 + ",\"producer_id\":" + d.producerId() + ",\"partitions\":" + d.topicPartitions().size()
                 + ",\"coordinator_id\":" + d.coordinatorId()
                 + ",\"active_producers\":" + producers.size()
                 + ",\"txn_start_offset\":" + ps.currentTransactionStartOffset().orElse(-1L)
                 + ",\"last_sequence\":" + ps.lastSequence() + ",\"aborted\":true}");
            return 0;
        }
    }

    public static void main(String[] args) {
        int rc;
        try {
            Map<String, List<String>> o = parse(args, 1);
            switch (args.length > 0 ? args[0] : "") {
                case "transform": rc = transform(o); break;
                case "produce": rc = produce(o); break;
                case "fence": rc = fence(o); break;
                case "open": rc = open(o); break;
                case "admin": rc = admin(o); break;
                default:
                    System.err.println("usage: TxnDriver transform|produce|fence|open|admin --option value ...");
                    rc = 2;
            }
        } catch (Throwable t) {
            t.printStackTrace();
            emit("{\"event\":\"error\",\"error_class\":" + q(errorClass(t)) + ",\"message\":"
                 + q(String.valueOf(t.getMessage())) + "}");
            rc = 1;
        }
        System.exit(rc);
    }
}
