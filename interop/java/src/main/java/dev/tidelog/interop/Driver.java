package dev.tidelog.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Pattern;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * The Java side of tidelog's interoperability tests: one JVM per test module that runs
 * Kafka's own client and tools on command.
 *
 * <p>Protocol: one JSON object per line on standard input, {"id": n, "op": "...", ...};
 * one JSON object per line on standard output, {"id": n, "ok": true, "result": ...} or
 * {"id": n, "ok": false, "error": "SimpleExceptionName", "message": "..."}. Commands run
 * one at a time, in order. Producers, consumers and admin clients live under names the
 * caller picks. A result for one item of a batch (a topic, a partition, a group) that
 * failed is {"error": "...", "message": "..."} in place of its value, so one call can
 * report both outcomes. Keys and values are UTF-8 strings (or null).
 *
 * <p>Tools ("tool.run") run in this JVM: Kafka's Exit procedure is replaced by one that
 * records the code and stops the calling thread, System.out and System.err are captured
 * for the call, and the exit code, the output and the error output are returned. Client and tool log lines go where
 * slf4j-simple sends them (the caller sets org.slf4j.simpleLogger.logFile).
 */
public final class Driver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true,
            StandardCharsets.UTF_8);

    private final Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
    private final Map<String, KafkaConsumer<byte[], byte[]>> consumers = new HashMap<>();
    private final Map<String, List<Map<String, Object>>> rebalanceEvents = new HashMap<>();
    private final Map<String, Admin> admins = new HashMap<>();

    /**
     * The tool run in progress. A tool's Exit.exit(code) ends the process in a real JVM:
     * here the first call records the code, lets the caller go on and parks the calling
     * thread for good, so nothing after it runs (as in a real exit).
     */
    static final class ToolRun {
        final java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
        volatile Integer code;
        volatile Throwable failure;

        void finish(Integer exitCode, Throwable error) {
            synchronized (this) {
                if (code == null && failure == null) {
                    code = exitCode;
                    failure = error;
                }
            }
            done.countDown();
        }
    }

    private static volatile ToolRun currentTool;

    private static void exitProcedure(int code, String message) {
        ToolRun run = currentTool;
        if (run == null) {
            Runtime.getRuntime().halt(code);
        }
        run.finish(code, null);
        while (true) {
            java.util.concurrent.locks.LockSupport.park();
        }
    }

    public static void main(String[] args) throws Exception {
        Exit.setExitProcedure(Driver::exitProcedure);
        Exit.setHaltProcedure(Driver::exitProcedure);
        // A tool's shutdown hooks would run when this JVM ends, not when the tool does.
        Exit.setShutdownHookAdder((name, runnable) -> { });
        Driver driver = new Driver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        OUT.println(JSON.writeValueAsString(Map.of("ready", true, "kafka",
                org.apache.kafka.common.utils.internals.AppInfoParser.getVersion())));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode command = JSON.readTree(line);
            Map<String, Object> answer = new LinkedHashMap<>();
            answer.put("id", command.path("id").asLong());
            long started = System.nanoTime();
            try {
                Object result = driver.execute(command.path("op").asText(), command);
                answer.put("ok", true);
                answer.put("result", result);
            } catch (Throwable e) {
                Throwable cause = unwrap(e);
                answer.put("ok", false);
                answer.put("error", cause.getClass().getSimpleName());
                answer.put("message", String.valueOf(cause.getMessage()));
            }
            answer.put("ms", (System.nanoTime() - started) / 1_000_000);
            OUT.println(JSON.writeValueAsString(answer));
            if ("exit".equals(command.path("op").asText())) {
                break;
            }
        }
        driver.closeAll();
        Runtime.getRuntime().halt(0);
    }

    private static Throwable unwrap(Throwable e) {
        while ((e instanceof ExecutionException || e instanceof java.util.concurrent.CompletionException
                || e instanceof java.lang.reflect.InvocationTargetException) && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    private static Map<String, Object> failure(Throwable e) {
        Throwable cause = unwrap(e);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("error", cause.getClass().getSimpleName());
        out.put("message", String.valueOf(cause.getMessage()));
        return out;
    }

    private Object execute(String op, JsonNode c) throws Exception {
        switch (op) {
            case "ping":
                return "pong";
            case "exit":
                return null;
            // ---- producer ----
            case "producer.create": {
                Properties props = properties(c.path("config"));
                producers.put(c.path("name").asText(), new KafkaProducer<>(props, new ByteArraySerializer(),
                        new ByteArraySerializer()));
                return null;
            }
            case "producer.send":
                return send(producer(c), c);
            case "producer.flush":
                producer(c).flush();
                return null;
            case "producer.initTransactions":
                producer(c).initTransactions();
                return null;
            case "producer.beginTransaction":
                producer(c).beginTransaction();
                return null;
            case "producer.commitTransaction":
                producer(c).commitTransaction();
                return null;
            case "producer.abortTransaction":
                producer(c).abortTransaction();
                return null;
            case "producer.sendOffsetsToTransaction": {
                KafkaConsumer<byte[], byte[]> consumer = consumers.get(c.path("consumer").asText());
                if (consumer == null) {
                    throw new IllegalArgumentException("no consumer " + c.path("consumer").asText());
                }
                producer(c).sendOffsetsToTransaction(offsets(c.path("offsets")), consumer.groupMetadata());
                return null;
            }
            case "producer.partitionsFor": {
                List<Object> out = new ArrayList<>();
                for (var info : producer(c).partitionsFor(c.path("topic").asText())) {
                    out.add(info.partition());
                }
                return out;
            }
            case "producer.close": {
                KafkaProducer<byte[], byte[]> p = producers.remove(c.path("name").asText());
                if (p != null) {
                    p.close(Duration.ofMillis(c.path("timeout_ms").asLong(10_000)));
                }
                return null;
            }
            // ---- consumer ----
            case "consumer.create": {
                Properties props = properties(c.path("config"));
                String name = c.path("name").asText();
                consumers.put(name, new KafkaConsumer<>(props, new ByteArrayDeserializer(),
                        new ByteArrayDeserializer()));
                rebalanceEvents.put(name, new ArrayList<>());
                return null;
            }
            case "consumer.subscribe": {
                KafkaConsumer<byte[], byte[]> consumer = consumer(c);
                ConsumerRebalanceListener listener = listener(c.path("name").asText());
                if (c.has("topics")) {
                    consumer.subscribe(strings(c.path("topics")), listener);
                } else if (c.has("pattern")) {
                    consumer.subscribe(Pattern.compile(c.path("pattern").asText()), listener);
                } else {
                    consumer.subscribe(new SubscriptionPattern(c.path("subscription_pattern").asText()), listener);
                }
                return null;
            }
            case "consumer.unsubscribe":
                consumer(c).unsubscribe();
                return null;
            case "consumer.assign":
                consumer(c).assign(partitions(c.path("partitions")));
                return null;
            case "consumer.assignment":
                return names(consumer(c).assignment());
            case "consumer.subscription":
                return new ArrayList<>(new java.util.TreeSet<>(consumer(c).subscription()));
            case "consumer.poll":
                return poll(c);
            case "consumer.commitSync":
                if (c.has("offsets")) {
                    consumer(c).commitSync(offsets(c.path("offsets")), Duration.ofSeconds(30));
                } else {
                    consumer(c).commitSync(Duration.ofSeconds(30));
                }
                return null;
            case "consumer.committed": {
                Map<TopicPartition, OffsetAndMetadata> committed = consumer(c).committed(
                        new HashSet<>(partitions(c.path("partitions"))), Duration.ofSeconds(30));
                Map<String, Object> out = new TreeMap<>();
                committed.forEach((tp, om) -> out.put(tp.toString(), om == null ? null : om.offset()));
                return out;
            }
            case "consumer.position":
                return consumer(c).position(partition(c.path("partition")), Duration.ofSeconds(30));
            case "consumer.seek":
                consumer(c).seek(partition(c.path("partition")), c.path("offset").asLong());
                return null;
            case "consumer.seekToBeginning":
                consumer(c).seekToBeginning(partitions(c.path("partitions")));
                return null;
            case "consumer.seekToEnd":
                consumer(c).seekToEnd(partitions(c.path("partitions")));
                return null;
            case "consumer.pause":
                consumer(c).pause(partitions(c.path("partitions")));
                return null;
            case "consumer.resume":
                consumer(c).resume(partitions(c.path("partitions")));
                return null;
            case "consumer.paused":
                return names(consumer(c).paused());
            case "consumer.endOffsets": {
                Map<String, Object> out = new TreeMap<>();
                consumer(c).endOffsets(partitions(c.path("partitions")), Duration.ofSeconds(30))
                        .forEach((tp, offset) -> out.put(tp.toString(), offset));
                return out;
            }
            case "consumer.beginningOffsets": {
                Map<String, Object> out = new TreeMap<>();
                consumer(c).beginningOffsets(partitions(c.path("partitions")), Duration.ofSeconds(30))
                        .forEach((tp, offset) -> out.put(tp.toString(), offset));
                return out;
            }
            case "consumer.groupMetadata": {
                var m = consumer(c).groupMetadata();
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("group_id", m.groupId());
                out.put("generation_id", m.generationId());
                out.put("member_id", m.memberId());
                return out;
            }
            case "consumer.events": {
                List<Map<String, Object>> events = rebalanceEvents.get(c.path("name").asText());
                List<Map<String, Object>> out = new ArrayList<>(events);
                events.clear();
                return out;
            }
            case "consumer.close": {
                KafkaConsumer<byte[], byte[]> consumer = consumers.remove(c.path("name").asText());
                if (consumer != null) {
                    consumer.close(Duration.ofMillis(c.path("timeout_ms").asLong(10_000)));
                }
                return null;
            }
            // ---- admin ----
            case "admin.create":
                admins.put(c.path("name").asText("admin"), Admin.create(properties(c.path("config"))));
                return null;
            case "admin.close": {
                Admin admin = admins.remove(c.path("name").asText("admin"));
                if (admin != null) {
                    admin.close(Duration.ofSeconds(10));
                }
                return null;
            }
            // ---- tools ----
            case "tool.run":
                return runTool(c);
            default:
                if (op.startsWith("admin.")) {
                    return adminCall(op.substring("admin.".length()), admin(c), c);
                }
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    // ------------------------------------------------------------------ helpers

    private KafkaProducer<byte[], byte[]> producer(JsonNode c) {
        KafkaProducer<byte[], byte[]> p = producers.get(c.path("name").asText());
        if (p == null) {
            throw new IllegalArgumentException("no producer " + c.path("name").asText());
        }
        return p;
    }

    private KafkaConsumer<byte[], byte[]> consumer(JsonNode c) {
        KafkaConsumer<byte[], byte[]> consumer = consumers.get(c.path("name").asText());
        if (consumer == null) {
            throw new IllegalArgumentException("no consumer " + c.path("name").asText());
        }
        return consumer;
    }

    private Admin admin(JsonNode c) {
        Admin admin = admins.get(c.path("admin").asText("admin"));
        if (admin == null) {
            throw new IllegalArgumentException("no admin client " + c.path("admin").asText("admin"));
        }
        return admin;
    }

    private static Properties properties(JsonNode config) {
        Properties props = new Properties();
        config.fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));
        return props;
    }

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    private static TopicPartition partition(JsonNode pair) {
        return new TopicPartition(pair.get(0).asText(), pair.get(1).asInt());
    }

    private static List<TopicPartition> partitions(JsonNode pairs) {
        List<TopicPartition> out = new ArrayList<>();
        pairs.forEach(p -> out.add(partition(p)));
        return out;
    }

    private static List<String> names(Collection<TopicPartition> partitions) {
        List<String> out = new ArrayList<>();
        partitions.forEach(tp -> out.add(tp.toString()));
        out.sort(null);
        return out;
    }

    /** [[topic, partition, offset], ...] as a commit map. */
    private static Map<TopicPartition, OffsetAndMetadata> offsets(JsonNode triples) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        triples.forEach(t -> out.put(new TopicPartition(t.get(0).asText(), t.get(1).asInt()),
                new OffsetAndMetadata(t.get(2).asLong(), t.size() > 3 ? t.get(3).asText() : "")));
        return out;
    }

    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() || node.isMissingNode() ? null
                : node.asText().getBytes(StandardCharsets.UTF_8);
    }

    private static String text(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }

    private ConsumerRebalanceListener listener(String name) {
        List<Map<String, Object>> events = rebalanceEvents.get(name);
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                events.add(Map.of("event", "revoked", "partitions", names(partitions)));
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                events.add(Map.of("event", "assigned", "partitions", names(partitions)));
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                events.add(Map.of("event", "lost", "partitions", names(partitions)));
            }
        };
    }

    /** Sends every record, then waits for each: [{partition, offset}|{error, message}, ...]. */
    private static List<Object> send(KafkaProducer<byte[], byte[]> producer, JsonNode c) {
        String topic = c.path("topic").asText();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        for (JsonNode r : c.path("records")) {
            Integer partition = r.has("partition") ? r.get("partition").asInt() : null;
            Long timestamp = r.has("timestamp") ? r.get("timestamp").asLong() : null;
            ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(r.has("topic") ? r.get("topic").asText()
                    : topic, partition, timestamp, bytes(r.get("key")), bytes(r.get("value")));
            for (JsonNode h : r.path("headers")) {
                record.headers().add(h.get(0).asText(), bytes(h.get(1)));
            }
            try {
                futures.add(producer.send(record));
            } catch (RuntimeException e) {
                futures.add(java.util.concurrent.CompletableFuture.failedFuture(e));
            }
        }
        long timeoutMs = c.path("timeout_ms").asLong(30_000);
        long deadline = System.currentTimeMillis() + timeoutMs;
        List<Object> out = new ArrayList<>();
        for (Future<RecordMetadata> f : futures) {
            try {
                RecordMetadata m = f.get(Math.max(1, deadline - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("topic", m.topic());
                one.put("partition", m.partition());
                one.put("offset", m.hasOffset() ? m.offset() : -1);
                one.put("timestamp", m.timestamp());
                out.add(one);
            } catch (Exception e) {
                out.add(failure(e));
            }
        }
        return out;
    }

    /**
     * Polls one or more consumers in turn (so that a rebalance among them can complete in
     * one JVM thread) until "count" records have arrived in all, or every named consumer has
     * a non-empty assignment ("until_assigned"), or "timeout_ms" passes.
     */
    private Map<String, Object> poll(JsonNode c) {
        List<String> names = c.has("names") ? strings(c.path("names")) : List.of(c.path("name").asText());
        long timeoutMs = c.path("timeout_ms").asLong(10_000);
        int want = c.path("count").asInt(-1);
        boolean untilAssigned = c.path("until_assigned").asBoolean(false);
        int total = c.has("expected_partitions") ? c.path("expected_partitions").asInt() : -1;
        long pollMs = c.path("poll_ms").asLong(100);
        long deadline = System.currentTimeMillis() + timeoutMs;
        Map<String, List<Map<String, Object>>> records = new LinkedHashMap<>();
        names.forEach(n -> records.put(n, new ArrayList<>()));
        int got = 0;
        do {
            for (String name : names) {
                KafkaConsumer<byte[], byte[]> consumer = consumers.get(name);
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(pollMs));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    Map<String, Object> one = new LinkedHashMap<>();
                    one.put("topic", r.topic());
                    one.put("partition", r.partition());
                    one.put("offset", r.offset());
                    one.put("timestamp", r.timestamp());
                    one.put("key", text(r.key()));
                    one.put("value", text(r.value()));
                    List<Object> headers = new ArrayList<>();
                    for (Header h : r.headers()) {
                        headers.add(java.util.Arrays.asList(h.key(), text(h.value())));
                    }
                    one.put("headers", headers);
                    records.get(name).add(one);
                    got++;
                }
            }
            if (want >= 0 && got >= want) {
                break;
            }
            if (untilAssigned) {
                int assigned = 0;
                boolean all = true;
                for (String name : names) {
                    int size = consumers.get(name).assignment().size();
                    all &= size > 0;
                    assigned += size;
                }
                if (all && (total < 0 || assigned == total)) {
                    break;
                }
            }
        } while (System.currentTimeMillis() < deadline);
        Map<String, Object> out = new LinkedHashMap<>();
        if (c.has("names")) {
            Map<String, Object> assignments = new LinkedHashMap<>();
            names.forEach(n -> assignments.put(n, names(consumers.get(n).assignment())));
            out.put("records", records);
            out.put("assignments", assignments);
        } else {
            out.put("records", records.get(names.get(0)));
            out.put("assignment", names(consumers.get(names.get(0)).assignment()));
        }
        return out;
    }

    // ------------------------------------------------------------------ admin

    private static <T> T get(KafkaFuture<T> future) throws Exception {
        try {
            return future.get(60, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            throw new TimeoutException("admin call did not complete in 60 s");
        }
    }

    private static <K> Map<String, Object> each(Map<K, ? extends KafkaFuture<?>> futures,
                                                java.util.function.Function<Object, Object> render) {
        Map<String, Object> out = new TreeMap<>();
        futures.forEach((key, future) -> {
            try {
                out.put(String.valueOf(key), render.apply(future.get(60, TimeUnit.SECONDS)));
            } catch (Exception e) {
                out.put(String.valueOf(key), failure(e));
            }
        });
        return out;
    }

    private static Map<String, Object> node(Node n) {
        if (n == null) {
            return null;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("id", n.id());
        out.put("host", n.host());
        out.put("port", n.port());
        out.put("rack", n.rack());
        return out;
    }

    private static ConfigResource resource(JsonNode c) {
        return new ConfigResource(ConfigResource.Type.valueOf(c.path("resource_type").asText("TOPIC")),
                c.path("resource_name").asText());
    }

    private static ResourcePatternFilter patternFilter(JsonNode c) {
        return new ResourcePatternFilter(ResourceType.valueOf(c.path("resource_type").asText("ANY")),
                c.hasNonNull("resource_name") ? c.get("resource_name").asText() : null,
                PatternType.valueOf(c.path("pattern_type").asText("ANY")));
    }

    private static AccessControlEntryFilter entryFilter(JsonNode c) {
        return new AccessControlEntryFilter(c.hasNonNull("principal") ? c.get("principal").asText() : null,
                c.hasNonNull("host") ? c.get("host").asText() : null,
                AclOperation.valueOf(c.path("operation").asText("ANY")),
                AclPermissionType.valueOf(c.path("permission").asText("ANY")));
    }

    private static Map<String, Object> binding(AclBinding b) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("resource_type", b.pattern().resourceType().name());
        out.put("resource_name", b.pattern().name());
        out.put("pattern_type", b.pattern().patternType().name());
        out.put("principal", b.entry().principal());
        out.put("host", b.entry().host());
        out.put("operation", b.entry().operation().name());
        out.put("permission", b.entry().permissionType().name());
        return out;
    }

    private static OffsetSpec offsetSpec(String spec) {
        switch (spec) {
            case "earliest":
                return OffsetSpec.earliest();
            case "latest":
                return OffsetSpec.latest();
            case "max_timestamp":
                return OffsetSpec.maxTimestamp();
            default:
                return OffsetSpec.forTimestamp(Long.parseLong(spec));
        }
    }

    private Object adminCall(String call, Admin admin, JsonNode c) throws Exception {
        switch (call) {
            case "createTopics": {
                List<NewTopic> topics = new ArrayList<>();
                for (JsonNode t : c.path("topics")) {
                    NewTopic topic = new NewTopic(t.path("name").asText(),
                            t.has("partitions") ? java.util.Optional.of(t.get("partitions").asInt())
                                    : java.util.Optional.empty(),
                            t.has("replication_factor") ? java.util.Optional.of((short) t.get("replication_factor").asInt())
                                    : java.util.Optional.empty());
                    if (t.has("configs")) {
                        Map<String, String> configs = new HashMap<>();
                        t.get("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
                        topic.configs(configs);
                    }
                    topics.add(topic);
                }
                var result = admin.createTopics(topics);
                return each(result.values(), x -> "created");
            }
            case "deleteTopics":
                return each(admin.deleteTopics(strings(c.path("topics"))).topicNameValues(), x -> "deleted");
            case "listTopics": {
                ListTopicsOptions options = new ListTopicsOptions().listInternal(c.path("internal").asBoolean(false));
                return new ArrayList<>(new java.util.TreeSet<>(get(admin.listTopics(options).names())));
            }
            case "describeTopics":
                return each(admin.describeTopics(strings(c.path("topics"))).topicNameValues(), d -> {
                    TopicDescription t = (TopicDescription) d;
                    Map<String, Object> out = new LinkedHashMap<>();
                    out.put("name", t.name());
                    out.put("topic_id", t.topicId().toString());
                    out.put("internal", t.isInternal());
                    List<Object> parts = new ArrayList<>();
                    for (TopicPartitionInfo p : t.partitions()) {
                        Map<String, Object> one = new LinkedHashMap<>();
                        one.put("partition", p.partition());
                        one.put("leader", p.leader() == null ? null : p.leader().id());
                        one.put("replicas", p.replicas().stream().map(Node::id).toList());
                        one.put("isr", p.isr().stream().map(Node::id).toList());
                        parts.add(one);
                    }
                    out.put("partitions", parts);
                    return out;
                });
            case "createPartitions": {
                Map<String, NewPartitions> request = new HashMap<>();
                c.path("topics").fields().forEachRemaining(e ->
                        request.put(e.getKey(), NewPartitions.increaseTo(e.getValue().asInt())));
                return each(admin.createPartitions(request).values(), x -> "ok");
            }
            case "describeCluster": {
                DescribeClusterResult r = admin.describeCluster();
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("cluster_id", get(r.clusterId()));
                out.put("controller", node(get(r.controller())));
                List<Object> nodes = new ArrayList<>();
                get(r.nodes()).stream().sorted(java.util.Comparator.comparingInt(Node::id))
                        .forEach(n -> nodes.add(node(n)));
                out.put("nodes", nodes);
                return out;
            }
            case "describeConfigs": {
                ConfigResource resource = resource(c);
                Config config = get(admin.describeConfigs(List.of(resource)).all()).get(resource);
                Map<String, Object> out = new TreeMap<>();
                for (ConfigEntry e : config.entries()) {
                    Map<String, Object> one = new LinkedHashMap<>();
                    one.put("value", e.value());
                    one.put("source", e.source().name());
                    one.put("sensitive", e.isSensitive());
                    one.put("read_only", e.isReadOnly());
                    out.put(e.name(), one);
                }
                return out;
            }
            case "incrementalAlterConfigs": {
                ConfigResource resource = resource(c);
                List<AlterConfigOp> ops = new ArrayList<>();
                for (JsonNode o : c.path("ops")) {
                    ops.add(new AlterConfigOp(new ConfigEntry(o.path("name").asText(),
                            o.hasNonNull("value") ? o.get("value").asText() : null),
                            AlterConfigOp.OpType.valueOf(o.path("op").asText("SET"))));
                }
                get(admin.incrementalAlterConfigs(Map.of(resource, ops)).all());
                return "ok";
            }
            case "listGroups": {
                List<Object> out = new ArrayList<>();
                for (GroupListing g : get(admin.listGroups().all())) {
                    Map<String, Object> one = new LinkedHashMap<>();
                    one.put("group_id", g.groupId());
                    one.put("type", g.type().map(Enum::name).orElse(null));
                    one.put("protocol", g.protocol());
                    one.put("state", g.groupState().map(Enum::name).orElse(null));
                    out.add(one);
                }
                return out;
            }
            case "listConsumerGroups": {
                List<Object> out = new ArrayList<>();
                @SuppressWarnings("deprecation")
                var listings = get(admin.listConsumerGroups().all());
                for (var g : listings) {
                    Map<String, Object> one = new LinkedHashMap<>();
                    one.put("group_id", g.groupId());
                    one.put("type", g.type().map(Enum::name).orElse(null));
                    one.put("state", g.groupState().map(Enum::name).orElse(null));
                    out.add(one);
                }
                return out;
            }
            case "describeConsumerGroups":
                return each(admin.describeConsumerGroups(strings(c.path("groups"))).describedGroups(), d -> {
                    ConsumerGroupDescription g = (ConsumerGroupDescription) d;
                    Map<String, Object> out = new LinkedHashMap<>();
                    out.put("group_id", g.groupId());
                    out.put("state", g.groupState().name());
                    out.put("type", g.type().name());
                    out.put("assignor", g.partitionAssignor());
                    out.put("simple", g.isSimpleConsumerGroup());
                    out.put("coordinator", g.coordinator() == null ? null : g.coordinator().id());
                    out.put("group_epoch", g.groupEpoch().orElse(null));
                    out.put("target_assignment_epoch", g.targetAssignmentEpoch().orElse(null));
                    List<Object> members = new ArrayList<>();
                    for (MemberDescription m : g.members()) {
                        Map<String, Object> one = new LinkedHashMap<>();
                        one.put("member_id", m.consumerId());
                        one.put("client_id", m.clientId());
                        one.put("host", m.host());
                        one.put("assignment", names(m.assignment().topicPartitions()));
                        one.put("member_epoch", m.memberEpoch().orElse(null));
                        members.add(one);
                    }
                    out.put("members", members);
                    return out;
                });
            case "listConsumerGroupOffsets": {
                Map<TopicPartition, OffsetAndMetadata> offsets =
                        get(admin.listConsumerGroupOffsets(c.path("group").asText()).partitionsToOffsetAndMetadata());
                Map<String, Object> out = new TreeMap<>();
                offsets.forEach((tp, om) -> out.put(tp.toString(), om == null ? null : om.offset()));
                return out;
            }
            case "alterConsumerGroupOffsets":
                get(admin.alterConsumerGroupOffsets(c.path("group").asText(), offsets(c.path("offsets"))).all());
                return "ok";
            case "deleteConsumerGroups":
                return each(admin.deleteConsumerGroups(strings(c.path("groups"))).deletedGroups(), x -> "deleted");
            case "describeAcls": {
                List<Object> out = new ArrayList<>();
                for (AclBinding b : get(admin.describeAcls(new AclBindingFilter(patternFilter(c), entryFilter(c))).values())) {
                    out.add(binding(b));
                }
                return out;
            }
            case "createAcls": {
                List<AclBinding> bindings = new ArrayList<>();
                for (JsonNode a : c.path("acls")) {
                    bindings.add(new AclBinding(new ResourcePattern(ResourceType.valueOf(a.path("resource_type").asText()),
                            a.path("resource_name").asText(), PatternType.valueOf(a.path("pattern_type").asText("LITERAL"))),
                            new AccessControlEntry(a.path("principal").asText(), a.path("host").asText("*"),
                                    AclOperation.valueOf(a.path("operation").asText()),
                                    AclPermissionType.valueOf(a.path("permission").asText("ALLOW")))));
                }
                return each(admin.createAcls(bindings).values(), x -> "created");
            }
            case "deleteAcls": {
                AclBindingFilter filter = new AclBindingFilter(patternFilter(c), entryFilter(c));
                var result = admin.deleteAcls(List.of(filter)).all();
                List<Object> out = new ArrayList<>();
                for (AclBinding b : get(result)) {
                    out.add(binding(b));
                }
                return out;
            }
            case "electLeaders": {
                Set<TopicPartition> parts = c.has("partitions") ? new HashSet<>(partitions(c.path("partitions"))) : null;
                Map<TopicPartition, java.util.Optional<Throwable>> result = get(admin.electLeaders(
                        ElectionType.valueOf(c.path("election").asText("PREFERRED")), parts).partitions());
                Map<String, Object> out = new TreeMap<>();
                result.forEach((tp, error) -> out.put(tp.toString(), error.map(Driver::failure).orElse(null)));
                return out;
            }
            case "describeLogDirs": {
                List<Integer> brokers = new ArrayList<>();
                c.path("brokers").forEach(b -> brokers.add(b.asInt()));
                return each(admin.describeLogDirs(brokers).descriptions(), d -> {
                    @SuppressWarnings("unchecked")
                    Map<String, LogDirDescription> dirs = (Map<String, LogDirDescription>) d;
                    Map<String, Object> out = new TreeMap<>();
                    dirs.forEach((path, dir) -> {
                        Map<String, Object> one = new LinkedHashMap<>();
                        one.put("error", dir.error() == null ? null : dir.error().getClass().getSimpleName());
                        Map<String, Object> replicas = new TreeMap<>();
                        for (Map.Entry<TopicPartition, ReplicaInfo> e : dir.replicaInfos().entrySet()) {
                            replicas.put(e.getKey().toString(), Map.of("size", e.getValue().size(),
                                    "offset_lag", e.getValue().offsetLag()));
                        }
                        one.put("replicas", replicas);
                        one.put("total_bytes", dir.totalBytes().isPresent() ? dir.totalBytes().getAsLong() : null);
                        one.put("usable_bytes", dir.usableBytes().isPresent() ? dir.usableBytes().getAsLong() : null);
                        out.put(path, one);
                    });
                    return out;
                });
            }
            case "deleteRecords": {
                Map<TopicPartition, RecordsToDelete> request = new HashMap<>();
                for (JsonNode t : c.path("offsets")) {
                    request.put(new TopicPartition(t.get(0).asText(), t.get(1).asInt()),
                            RecordsToDelete.beforeOffset(t.get(2).asLong()));
                }
                return each(admin.deleteRecords(request).lowWatermarks(),
                        x -> ((org.apache.kafka.clients.admin.DeletedRecords) x).lowWatermark());
            }
            case "listOffsets": {
                Map<TopicPartition, OffsetSpec> request = new HashMap<>();
                for (JsonNode p : c.path("partitions")) {
                    request.put(partition(p), offsetSpec(c.path("spec").asText("latest")));
                }
                ListOffsetsOptions options = new ListOffsetsOptions(
                        IsolationLevel.valueOf(c.path("isolation").asText("READ_UNCOMMITTED")));
                ListOffsetsResult result = admin.listOffsets(request, options);
                Map<String, Object> out = new TreeMap<>();
                for (TopicPartition tp : request.keySet()) {
                    try {
                        ListOffsetsResult.ListOffsetsResultInfo info = get(result.partitionResult(tp));
                        Map<String, Object> one = new LinkedHashMap<>();
                        one.put("offset", info.offset());
                        one.put("timestamp", info.timestamp());
                        one.put("leader_epoch", info.leaderEpoch().orElse(null));
                        out.put(tp.toString(), one);
                    } catch (Exception e) {
                        out.put(tp.toString(), failure(e));
                    }
                }
                return out;
            }
            case "listTransactions": {
                List<Object> out = new ArrayList<>();
                for (TransactionListing t : get(admin.listTransactions().all())) {
                    Map<String, Object> one = new LinkedHashMap<>();
                    one.put("transactional_id", t.transactionalId());
                    one.put("producer_id", t.producerId());
                    one.put("state", t.state().name());
                    out.add(one);
                }
                return out;
            }
            case "describeTransactions": {
                var described = admin.describeTransactions(strings(c.path("ids")));
                Map<String, KafkaFuture<TransactionDescription>> futures = new LinkedHashMap<>();
                for (String id : strings(c.path("ids"))) {
                    futures.put(id, described.description(id));
                }
                return each(futures, d -> {
                    TransactionDescription t = (TransactionDescription) d;
                    Map<String, Object> out = new LinkedHashMap<>();
                    out.put("coordinator", t.coordinatorId());
                    out.put("state", t.state().name());
                    out.put("producer_id", t.producerId());
                    out.put("producer_epoch", t.producerEpoch());
                    out.put("timeout_ms", t.transactionTimeoutMs());
                    out.put("partitions", names(t.topicPartitions()));
                    return out;
                });
            }
            case "describeProducers": {
                var result = admin.describeProducers(partitions(c.path("partitions")));
                Map<String, KafkaFuture<?>> futures = new LinkedHashMap<>();
                for (TopicPartition tp : partitions(c.path("partitions"))) {
                    futures.put(tp.toString(), result.partitionResult(tp));
                }
                return each(futures, d -> {
                    List<Object> out = new ArrayList<>();
                    for (var p : ((org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState) d)
                            .activeProducers()) {
                        Map<String, Object> one = new LinkedHashMap<>();
                        one.put("producer_id", p.producerId());
                        one.put("producer_epoch", p.producerEpoch());
                        one.put("last_sequence", p.lastSequence());
                        one.put("current_transaction_start_offset", p.currentTransactionStartOffset().isPresent()
                                ? p.currentTransactionStartOffset().getAsLong() : null);
                        out.add(one);
                    }
                    return out;
                });
            }
            case "describeMetadataQuorum": {
                QuorumInfo q = get(admin.describeMetadataQuorum().quorumInfo());
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("leader_id", q.leaderId());
                out.put("leader_epoch", q.leaderEpoch());
                out.put("high_watermark", q.highWatermark());
                out.put("voters", replicaStates(q.voters()));
                out.put("observers", replicaStates(q.observers()));
                return out;
            }
            case "describeFeatures": {
                FeatureMetadata f = get(admin.describeFeatures().featureMetadata());
                Map<String, Object> out = new LinkedHashMap<>();
                Map<String, Object> finalized = new TreeMap<>();
                f.finalizedFeatures().forEach((name, range) ->
                        finalized.put(name, List.of(range.minVersionLevel(), range.maxVersionLevel())));
                Map<String, Object> supported = new TreeMap<>();
                f.supportedFeatures().forEach((name, range) ->
                        supported.put(name, List.of(range.minVersion(), range.maxVersion())));
                out.put("finalized", finalized);
                out.put("supported", supported);
                out.put("epoch", f.finalizedFeaturesEpoch().orElse(null));
                return out;
            }
            case "describeUserScramCredentials": {
                var result = c.has("users") ? admin.describeUserScramCredentials(strings(c.path("users")))
                        : admin.describeUserScramCredentials();
                Map<String, Object> out = new TreeMap<>();
                for (Map.Entry<String, UserScramCredentialsDescription> e : get(result.all()).entrySet()) {
                    List<Object> infos = new ArrayList<>();
                    for (ScramCredentialInfo info : e.getValue().credentialInfos()) {
                        infos.add(Map.of("mechanism", info.mechanism().mechanismName(),
                                "iterations", info.iterations()));
                    }
                    out.put(e.getKey(), infos);
                }
                return out;
            }
            case "alterUserScramCredentials": {
                List<UserScramCredentialAlteration> alterations = new ArrayList<>();
                for (JsonNode a : c.path("upsertions")) {
                    alterations.add(new UserScramCredentialUpsertion(a.path("user").asText(),
                            new ScramCredentialInfo(ScramMechanism.fromMechanismName(a.path("mechanism").asText()),
                                    a.path("iterations").asInt(4096)), a.path("password").asText()));
                }
                for (JsonNode d : c.path("deletions")) {
                    alterations.add(new UserScramCredentialDeletion(d.path("user").asText(),
                            ScramMechanism.fromMechanismName(d.path("mechanism").asText())));
                }
                return each(admin.alterUserScramCredentials(alterations).values(), x -> "ok");
            }
            case "unsupported":
                return unsupported(admin, c.path("call").asText());
            default:
                throw new IllegalArgumentException("unknown admin call " + call);
        }
    }

    private static List<Object> replicaStates(List<QuorumInfo.ReplicaState> states) {
        List<Object> out = new ArrayList<>();
        for (QuorumInfo.ReplicaState s : states) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("replica_id", s.replicaId());
            one.put("log_end_offset", s.logEndOffset());
            one.put("last_fetch_timestamp", s.lastFetchTimestamp().isPresent() ? s.lastFetchTimestamp().getAsLong() : null);
            one.put("last_caught_up_timestamp", s.lastCaughtUpTimestamp().isPresent()
                    ? s.lastCaughtUpTimestamp().getAsLong() : null);
            out.add(one);
        }
        return out;
    }

    /** Admin calls whose APIs tidelog does not serve: the future's failure, as is. */
    private static Object unsupported(Admin admin, String call) throws Exception {
        KafkaFuture<?> future;
        switch (call) {
            case "describeClientQuotas":
                future = admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities();
                break;
            case "listPartitionReassignments":
                future = admin.listPartitionReassignments().reassignments();
                break;
            case "describeDelegationToken":
                future = admin.describeDelegationToken().delegationTokens();
                break;
            case "createDelegationToken":
                future = admin.createDelegationToken().delegationToken();
                break;
            case "describeShareGroups":
                future = admin.describeShareGroups(List.of("share-group")).all();
                break;
            case "listConfigResources":
                future = admin.listConfigResources().all();
                break;
            case "updateFeatures":
                future = admin.updateFeatures(Map.of("transaction.version",
                        new org.apache.kafka.clients.admin.FeatureUpdate((short) 2,
                                org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UPGRADE))).all();
                break;
            default:
                throw new IllegalArgumentException("unknown call " + call);
        }
        try {
            return Map.of("value", String.valueOf(get(future)));
        } catch (Exception e) {
            return failure(e);
        }
    }

    // ------------------------------------------------------------------ tools

    /**
     * Runs a tool's main(String[]) in this JVM ("class", "args"), output captured; with
     * "timeout_ms" the call returns after that long even if the tool has not finished.
     */
    private static Map<String, Object> runTool(JsonNode c) throws Exception {
        String className = c.path("class").asText();
        String[] args = strings(c.path("args")).toArray(new String[0]);
        Method main = Class.forName(className).getMethod("main", String[].class);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream savedOut = System.out;
        PrintStream savedErr = System.err;
        ToolRun run = new ToolRun();
        Thread thread = new Thread(() -> {
            try {
                main.invoke(null, (Object) args);
                run.finish(0, null);       // main returned: the JVM would exit 0 once its threads end
            } catch (Throwable e) {
                run.finish(1, unwrap(e));  // an uncaught exception: exit code 1
            }
        }, "tool-" + className);
        thread.setDaemon(true);
        boolean finished;
        currentTool = run;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            thread.start();
            finished = run.done.await(c.path("timeout_ms").asLong(60_000), TimeUnit.MILLISECONDS);
        } finally {
            System.out.flush();
            System.err.flush();
            System.setOut(savedOut);
            System.setErr(savedErr);
            currentTool = null;
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("exit_code", finished ? run.code : null);
        result.put("timed_out", !finished);
        result.put("stdout", out.toString(StandardCharsets.UTF_8));
        result.put("stderr", err.toString(StandardCharsets.UTF_8));
        if (run.failure != null) {
            result.put("exception", run.failure.getClass().getName() + ": " + run.failure.getMessage());
        }
        return result;
    }

    private void closeAll() {
        producers.values().forEach(p -> {
            try {
                p.close(Duration.ofSeconds(2));
            } catch (RuntimeException ignored) {
                // shutting down
            }
        });
        consumers.values().forEach(c -> {
            try {
                c.close(Duration.ofSeconds(2));
            } catch (RuntimeException ignored) {
                // shutting down
            }
        });
        admins.values().forEach(a -> {
            try {
                a.close(Duration.ofSeconds(2));
            } catch (RuntimeException ignored) {
                // shutting down
            }
        });
    }
}
