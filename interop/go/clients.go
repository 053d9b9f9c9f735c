package main

// Producers, group consumers, transactions and the background producer.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// member is one named client and what its group callbacks have seen.
type member struct {
	client   *kgo.Client
	session  *kgo.GroupTransactSession // set for eos.create
	mu       sync.Mutex
	assigned map[string]map[int32]bool
	events   []string // "assigned t/p", "revoked t/p", "lost t/p", in order
	bg       *background
}

type driver struct {
	clients map[string]*member
}

func newDriver() *driver { return &driver{clients: map[string]*member{}} }

func (d *driver) get(name string) (*member, error) {
	m, ok := d.clients[name]
	if !ok {
		return nil, fmt.Errorf("no client named %q", name)
	}
	return m, nil
}

func (d *driver) closeAll() {
	for _, m := range d.clients {
		m.close()
	}
}

func (m *member) close() {
	if m.bg != nil {
		m.bg.stop()
	}
	if m.session != nil {
		m.session.Close()
	} else {
		m.client.Close()
	}
}

func (m *member) note(kind string, partitions map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for topic, ps := range partitions {
		for _, p := range ps {
			m.events = append(m.events, fmt.Sprintf("%s %s/%d", kind, topic, p))
			if kind == "assigned" {
				if m.assigned[topic] == nil {
					m.assigned[topic] = map[int32]bool{}
				}
				m.assigned[topic][p] = true
			} else {
				delete(m.assigned[topic], p)
			}
		}
	}
}

// options turns a command's "config" object into kgo options. Every key is optional:
// brokers (list), acks (all | leader | none), idempotent (default true), compression,
// linger_ms, manual_partitions, transactional_id, transaction_timeout_ms, group, topics, regex,
// balancer (cooperative-sticky | range | sticky | round-robin), server_side_balancer (KIP-848), instance_id,
// session_timeout_ms, heartbeat_interval_ms, rebalance_timeout_ms, auto_commit (default
// false), read_committed, start (earliest | latest), retry_timeout_ms, metadata_max_age_ms, and
// librdkafka's security settings as `cluster up --secure` writes them (securityOptions).
func (m *member) options(cfg command) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.strs("brokers")...), kgo.WithLogger(kgoLogger{})}
	security, err := securityOptions(cfg)
	if err != nil {
		return nil, err
	}
	opts = append(opts, security...)
	switch cfg.strOr("acks", "all") {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "leader":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "none":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return nil, fmt.Errorf("acks must be all, leader or none, not %q", cfg.str("acks"))
	}
	if !cfg.flag("idempotent", true) && cfg.strOr("acks", "all") == "all" {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	if name := cfg.str("compression"); name != "" {
		codec, ok := codecs[name]
		if !ok {
			return nil, fmt.Errorf("unknown compression %q", name)
		}
		opts = append(opts, kgo.ProducerBatchCompression(codec))
	}
	if ms := cfg.num("linger_ms", -1); ms >= 0 {
		opts = append(opts, kgo.ProducerLinger(time.Duration(ms)*time.Millisecond))
	}
	if ms := cfg.num("metadata_max_age_ms", -1); ms >= 0 { // how soon new topics are seen
		opts = append(opts, kgo.MetadataMaxAge(time.Duration(ms)*time.Millisecond))
	}
	if cfg.flag("manual_partitions", false) {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	if ms := cfg.num("retry_timeout_ms", -1); ms >= 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(time.Duration(ms)*time.Millisecond))
	}
	if id := cfg.str("transactional_id"); id != "" {
		opts = append(opts, kgo.TransactionalID(id),
			kgo.TransactionTimeout(time.Duration(cfg.num("transaction_timeout_ms", 60_000))*time.Millisecond))
	}
	if cfg.flag("read_committed", false) {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if topics := cfg.strs("topics"); len(topics) > 0 {
		opts = append(opts, kgo.ConsumeTopics(topics...))
		if cfg.flag("regex", false) { // the topics are patterns
			opts = append(opts, kgo.ConsumeRegex())
		}
	}
	switch cfg.strOr("start", "earliest") {
	case "earliest":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	case "latest":
		opts = append(opts, kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	}
	if group := cfg.str("group"); group != "" {
		balancers := map[string]kgo.GroupBalancer{"cooperative-sticky": kgo.CooperativeStickyBalancer(),
			"range": kgo.RangeBalancer(), "sticky": kgo.StickyBalancer(), "round-robin": kgo.RoundRobinBalancer()}
		balancer, ok := balancers[cfg.strOr("balancer", "cooperative-sticky")]
		if !ok {
			return nil, fmt.Errorf("unknown balancer %q", cfg.str("balancer"))
		}
		opts = append(opts, kgo.ConsumerGroup(group), kgo.Balancers(balancer),
			kgo.SessionTimeout(time.Duration(cfg.num("session_timeout_ms", 6000))*time.Millisecond),
			kgo.HeartbeatInterval(time.Duration(cfg.num("heartbeat_interval_ms", 500))*time.Millisecond),
			kgo.RebalanceTimeout(time.Duration(cfg.num("rebalance_timeout_ms", 10_000))*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.note("assigned", p) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.note("revoked", p) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, p map[string][]int32) { m.note("lost", p) }))
		if id := cfg.str("instance_id"); id != "" { // KIP-345 static membership
			opts = append(opts, kgo.InstanceID(id))
		}
		if cfg.flag("server_side_balancer", false) {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		if !cfg.flag("auto_commit", false) {
			opts = append(opts, kgo.DisableAutoCommit())
		}
	}
	return opts, nil
}

func init() {
	handlers["client.create"] = func(d *driver, c command) (any, error) {
		name := c.str("name")
		if _, taken := d.clients[name]; taken {
			return nil, fmt.Errorf("a client named %q exists", name)
		}
		m := &member{assigned: map[string]map[int32]bool{}}
		opts, err := m.options(c.sub("config"))
		if err != nil {
			return nil, err
		}
		if c.flag("session", false) {
			m.session, err = kgo.NewGroupTransactSession(opts...)
			if err == nil {
				m.client = m.session.Client()
			}
		} else {
			m.client, err = kgo.NewClient(opts...)
		}
		if err != nil {
			return nil, err
		}
		d.clients[name] = m
		return name, nil
	}
	handlers["client.close"] = func(d *driver, c command) (any, error) {
		m, err := d.get(c.str("name"))
		if err != nil {
			return nil, err
		}
		m.close()
		delete(d.clients, c.str("name"))
		return nil, nil
	}
	handlers["produce"] = produce
	handlers["poll"] = poll
	handlers["assignment"] = func(d *driver, c command) (any, error) {
		m, err := d.get(c.str("name"))
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		assigned := map[string][]int32{}
		for topic, ps := range m.assigned {
			for p := range ps {
				assigned[topic] = append(assigned[topic], p)
			}
			sort.Slice(assigned[topic], func(i, j int) bool { return assigned[topic][i] < assigned[topic][j] })
		}
		_, generation := m.client.GroupMetadata()
		return map[string]any{"assigned": assigned, "events": append([]string(nil), m.events...),
			"generation": generation}, nil
	}
	handlers["commit"] = func(d *driver, c command) (any, error) {
		m, err := d.get(c.str("name"))
		if err != nil {
			return nil, err
		}
		ctx, cancel := c.timeout(30_000)
		defer cancel()
		if err := m.client.CommitUncommittedOffsets(ctx); err != nil {
			return nil, err
		}
		return offsetsOut(m.client.CommittedOffsets()), nil
	}
	handlers["txn.begin"] = func(d *driver, c command) (any, error) {
		m, err := d.get(c.str("name"))
		if err != nil {
			return nil, err
		}
		if m.session != nil {
			return nil, m.session.Begin()
		}
		return nil, m.client.BeginTransaction()
	}
	handlers["txn.end"] = func(d *driver, c command) (any, error) {
		m, err := d.get(c.str("name"))
		if err != nil {
			return nil, err
		}
		ctx, cancel := c.timeout(60_000)
		defer cancel()
		commit := kgo.TransactionEndTry(c.flag("commit", false))
		if m.session != nil {
			committed, err := m.session.End(ctx, commit)
			return map[string]any{"committed": committed}, err
		}
		if err := m.client.Flush(ctx); err != nil {
			return nil, err
		}
		return map[string]any{"committed": bool(commit)}, m.client.EndTransaction(ctx, commit)
	}
	handlers["eos.step"] = eosStep
	handlers["produce.start"] = startBackground
	handlers["produce.stop"] = stopBackground
}

func toRecord(raw any) (*kgo.Record, error) {
	fields, ok := raw.(map[string]any)
	if !ok {
		return nil, errors.New("a record must be an object")
	}
	r := &kgo.Record{}
	r.Topic, _ = fields["topic"].(string)
	if p, ok := fields["partition"].(float64); ok {
		r.Partition = int32(p)
	}
	if k, ok := fields["key"].(string); ok {
		r.Key = []byte(k)
	}
	if v, ok := fields["value"].(string); ok {
		r.Value = []byte(v)
	}
	headers, _ := fields["headers"].([]any)
	for _, h := range headers {
		pair := h.([]any)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: pair[0].(string), Value: []byte(pair[1].(string))})
	}
	return r, nil
}

// produce sends the records and waits for every one: each answer is the record's partition
// and offset, or its error, in the order given.
func produce(d *driver, c command) (any, error) {
	m, err := d.get(c.str("name"))
	if err != nil {
		return nil, err
	}
	raw, _ := c["records"].([]any)
	ctx, cancel := c.timeout(60_000)
	defer cancel()
	results := make([]map[string]any, len(raw))
	var wg sync.WaitGroup
	for i, rr := range raw {
		r, err := toRecord(rr)
		if err != nil {
			return nil, err
		}
		if r.Topic == "" {
			r.Topic = c.str("topic")
		}
		wg.Add(1)
		i := i
		promise := func(r *kgo.Record, err error) {
			if err != nil {
				results[i] = map[string]any{"error": errorKind(err), "message": err.Error()}
			} else {
				results[i] = map[string]any{"partition": r.Partition, "offset": r.Offset}
			}
			wg.Done()
		}
		if m.session != nil {
			m.session.Produce(ctx, r, promise)
		} else {
			m.client.Produce(ctx, r, promise)
		}
	}
	wg.Wait()
	return results, nil
}

func recordOut(r *kgo.Record) map[string]any {
	headers := make([][2]string, 0, len(r.Headers))
	for _, h := range r.Headers {
		headers = append(headers, [2]string{h.Key, string(h.Value)})
	}
	out := map[string]any{"topic": r.Topic, "partition": r.Partition, "offset": r.Offset,
		"value": string(r.Value), "headers": headers, "timestamp": r.Timestamp.UnixMilli()}
	if r.Key != nil {
		out["key"] = string(r.Key)
	} else {
		out["key"] = nil
	}
	return out
}

// poll polls the named clients at once until they have count records between them (or
// timeout_ms passes): {"records": {name: [...]}, "errors": [...]}.
func poll(d *driver, c command) (any, error) {
	names := c.strs("names")
	if len(names) == 0 {
		names = []string{c.str("name")}
	}
	members := make([]*member, len(names))
	for i, name := range names {
		m, err := d.get(name)
		if err != nil {
			return nil, err
		}
		members[i] = m
	}
	want := int(c.num("count", 1))
	ctx, cancel := c.timeout(30_000)
	defer cancel()
	var mu sync.Mutex
	got, total := map[string][]map[string]any{}, 0
	fetchErrors := []string{}
	var wg sync.WaitGroup
	for i, m := range members {
		name := names[i]
		got[name] = []map[string]any{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var fetches kgo.Fetches
				if m.session != nil {
					fetches = m.session.PollFetches(ctx)
				} else {
					fetches = m.client.PollFetches(ctx)
				}
				mu.Lock()
				fetches.EachError(func(t string, p int32, err error) {
					if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
						fetchErrors = append(fetchErrors, fmt.Sprintf("%s/%d: %v", t, p, err))
					}
				})
				fetches.EachRecord(func(r *kgo.Record) {
					got[name] = append(got[name], recordOut(r))
					total++
				})
				if total >= want {
					cancel()
				}
				mu.Unlock()
				if fetches.IsClientClosed() {
					return
				}
			}
		}()
	}
	wg.Wait()
	return map[string]any{"records": got, "errors": fetchErrors}, nil
}

// eosStep is one consume-transform-produce transaction of a GroupTransactSession: begin,
// poll until count records came in (or timeout_ms), send each to the output topic as
// "<value>:out" (same partition), then end it, committing if "commit" (the consumed offsets
// go into the transaction) or aborting (the session rewinds to the committed offsets).
func eosStep(d *driver, c command) (any, error) {
	m, err := d.get(c.str("name"))
	if err != nil {
		return nil, err
	}
	if m.session == nil {
		return nil, errors.New("eos.step needs a client created with session: true")
	}
	if err := m.session.Begin(); err != nil {
		return nil, err
	}
	want := int(c.num("count", 1))
	pollCtx, cancel := c.timeout(30_000)
	defer cancel()
	consumed := []string{}
	for len(consumed) < want && pollCtx.Err() == nil {
		fetches := m.session.PollFetches(pollCtx)
		var outputs []*kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			consumed = append(consumed, string(r.Value))
			outputs = append(outputs, &kgo.Record{Topic: c.str("output"), Partition: r.Partition, Key: r.Key,
				Value: append(append([]byte(nil), r.Value...), ":out"...)})
		})
		if len(outputs) > 0 {
			if err := m.session.ProduceSync(context.Background(), outputs...).FirstErr(); err != nil {
				return nil, err
			}
		}
	}
	endCtx, endCancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer endCancel()
	committed, err := m.session.End(endCtx, kgo.TransactionEndTry(c.flag("commit", false)))
	if err != nil {
		return nil, err
	}
	return map[string]any{"consumed": consumed, "committed": committed}, nil
}

func offsetsOut(offsets map[string]map[int32]kgo.EpochOffset) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for topic, ps := range offsets {
		out[topic] = map[string]int64{}
		for p, o := range ps {
			out[topic][fmt.Sprint(p)] = o.Offset
		}
	}
	return out
}

// background is a producer that keeps sending until stopped (produce.start/produce.stop):
// record i goes to partition i % partitions with the value "<prefix>-<i>"; every
// acknowledged record is remembered with its offset.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	acked  []map[string]any
	failed []string
	sent   int
}

const backgroundRecordsMax = 200_000 // a bound, whatever happens

func startBackground(d *driver, c command) (any, error) {
	m, err := d.get(c.str("name"))
	if err != nil {
		return nil, err
	}
	if m.bg != nil {
		return nil, errors.New("a background producer is running on this client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	bg := &background{cancel: cancel, done: make(chan struct{}), acked: []map[string]any{}, failed: []string{}}
	m.bg = bg
	topic, prefix := c.str("topic"), c.strOr("prefix", "bg")
	partitions := int32(c.num("partitions", 1))
	pause := time.Duration(c.num("pause_ms", 2)) * time.Millisecond
	go func() {
		defer close(bg.done)
		var inflight sync.WaitGroup
		for i := 0; i < backgroundRecordsMax && ctx.Err() == nil; i++ {
			value := fmt.Sprintf("%s-%d", prefix, i)
			r := &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(value)}
			inflight.Add(1)
			m.client.Produce(context.Background(), r, func(r *kgo.Record, err error) {
				bg.mu.Lock()
				if err != nil {
					bg.failed = append(bg.failed, value+": "+err.Error())
				} else {
					bg.acked = append(bg.acked, map[string]any{"value": value, "partition": r.Partition,
						"offset": r.Offset})
				}
				bg.mu.Unlock()
				inflight.Done()
			})
			bg.mu.Lock()
			bg.sent++
			bg.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
		inflight.Wait()
	}()
	return nil, nil
}

func (bg *background) stop() {
	bg.cancel()
	<-bg.done
}

func stopBackground(d *driver, c command) (any, error) {
	m, err := d.get(c.str("name"))
	if err != nil {
		return nil, err
	}
	if m.bg == nil {
		return nil, errors.New("no background producer on this client")
	}
	if c.flag("progress", false) { // how far it is, without stopping it
		m.bg.mu.Lock()
		defer m.bg.mu.Unlock()
		return map[string]any{"sent": m.bg.sent, "acked": len(m.bg.acked), "failed": len(m.bg.failed)}, nil
	}
	m.bg.stop()
	bg := m.bg
	m.bg = nil
	return map[string]any{"sent": bg.sent, "acked": bg.acked, "failed": bg.failed}, nil
}

// securityOptions reads librdkafka's names, as a `cluster up --secure` client.properties has
// them: security.protocol SASL_SSL or SSL, ssl.ca.location (a PEM file), sasl.mechanism
// (SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN), sasl.username, sasl.password.
func securityOptions(cfg command) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	protocol := cfg.strOr("security.protocol", "PLAINTEXT")
	if protocol == "SSL" || protocol == "SASL_SSL" {
		pool := x509.NewCertPool()
		if ca := cfg.str("ssl.ca.location"); ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, err
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificate in %s", ca)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	if protocol == "SASL_PLAINTEXT" || protocol == "SASL_SSL" {
		user, pass := cfg.str("sasl.username"), cfg.str("sasl.password")
		switch mechanism := cfg.str("sasl.mechanism"); mechanism {
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
		default:
			return nil, fmt.Errorf("unknown sasl.mechanism %q", mechanism)
		}
	}
	return opts, nil
}

// kgoLogger sends franz-go's log lines (info and up) to stderr.
type kgoLogger struct{}

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	pairs := make([]string, 0, len(keyvals)/2)
	for i := 0; i+1 < len(keyvals); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%v=%v", keyvals[i], keyvals[i+1]))
	}
	fmt.Fprintf(stderr, "%s [%s] %s %s\n", time.Now().Format("15:04:05.000"), level, msg, strings.Join(pairs, " "))
}
