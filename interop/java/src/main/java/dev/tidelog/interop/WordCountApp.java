package dev.tidelog.interop;

import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count, unchanged, as its own process (tests/interop/test_streams.py
 * starts it with {@code java -cp <class path> dev.tidelog.interop.WordCountApp} and may
 * kill it with SIGKILL mid-stream).
 *
 * <p>Arguments: {@code bootstrap application.id input-topic output-topic state.dir
 * [key=value ...]} (the extra pairs are Streams settings). Lines come from the input
 * topic; each is split into words; {@code groupBy(word)} re-keys them, which makes
 * Streams write a repartition topic; {@code count()} keeps a state store
 * ("counts") backed by a changelog topic; every new count goes to the output topic as
 * (word, decimal count) in UTF-8. {@code processing.guarantee} is exactly_once_v2
 * unless an extra pair says otherwise.
 *
 * <p>Standard output carries one line per state change, {@code STATE <new> <old>}, so the
 * test sees RUNNING; SIGTERM closes the app cleanly (Kafka Streams' shutdown hook
 * pattern) and prints {@code CLOSED}.
 */
public final class WordCountApp {
    private static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), true,
            StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: WordCountApp bootstrap application.id input output state.dir [k=v ...]");
            System.exit(2);
        }
        Properties settings = new Properties();
        settings.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        settings.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        settings.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        settings.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        settings.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        settings.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        for (String pair : Arrays.copyOfRange(args, 5, args.length)) {
            int eq = pair.indexOf('=');
            settings.put(pair.substring(0, eq), pair.substring(eq + 1));
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .map((word, count) -> KeyValue.pair(word, Long.toString(count)))
                .to(args[3], Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), settings);
        CountDownLatch closed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> OUT.println("STATE " + now + " " + before));
        streams.setUncaughtExceptionHandler(error -> {
            OUT.println("ERROR " + error);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            OUT.println("CLOSED");
            closed.countDown();
        }, "wordcount-shutdown"));
        streams.start();
        closed.await();
    }
}
