package main

// The admin calls, through kadm on a named client.

import (
	"context"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
)

func (d *driver) admin(c command) (*kadm.Client, error) {
	m, err := d.get(c.str("name"))
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(m.client), nil
}

// adminCall wraps an admin handler: the named client's kadm.Client and a 30 s deadline.
func adminCall(call func(ctx context.Context, adm *kadm.Client, c command) (any, error)) handler {
	return func(d *driver, c command) (any, error) {
		adm, err := d.admin(c)
		if err != nil {
			return nil, err
		}
		ctx, cancel := c.timeout(30_000)
		defer cancel()
		return call(ctx, adm, c)
	}
}

func errText(err error) any {
	if err == nil {
		return nil
	}
	return errorKind(err)
}

func init() {
	// {"topics": [{"name", "partitions", "replication_factor", "configs": {k: v}}]} -> {name: "created" | error}
	handlers["admin.createTopics"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		out := map[string]any{}
		raw, _ := c["topics"].([]any)
		for _, t := range raw {
			spec := command(t.(map[string]any))
			configs := map[string]*string{}
			for k, v := range spec.sub("configs") {
				value := fmt.Sprint(v)
				configs[k] = &value
			}
			resps, err := adm.CreateTopics(ctx, int32(spec.num("partitions", 1)), int16(spec.num("replication_factor", -1)),
				configs, spec.str("name"))
			resp := resps[spec.str("name")]
			switch {
			case err != nil:
				return nil, err
			case resp.Err != nil:
				out[spec.str("name")] = map[string]any{"error": errorKind(resp.Err), "message": resp.ErrMessage}
			default:
				out[spec.str("name")] = map[string]any{"partitions": resp.NumPartitions,
					"replication_factor": resp.ReplicationFactor}
			}
		}
		return out, nil
	})
	// {"topics": [...] (none: all), "internal": bool} -> {topic: {"internal", "partitions": [...]}}
	handlers["admin.listTopics"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		var details kadm.TopicDetails
		var err error
		if c.flag("internal", false) {
			details, err = adm.ListTopicsWithInternal(ctx, c.strs("topics")...)
		} else {
			details, err = adm.ListTopics(ctx, c.strs("topics")...)
		}
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for name, t := range details {
			partitions := []map[string]any{}
			for _, p := range t.Partitions.Sorted() {
				partitions = append(partitions, map[string]any{"partition": p.Partition, "leader": p.Leader,
					"leader_epoch": p.LeaderEpoch, "replicas": p.Replicas, "isr": p.ISR, "error": errText(p.Err)})
			}
			out[name] = map[string]any{"internal": t.IsInternal, "partitions": partitions, "error": errText(t.Err),
				"id": t.ID.String()}
		}
		return out, nil
	})
	// {"topics": [...]} -> {topic: {config: {"value", "source"}}}
	handlers["admin.describeTopicConfigs"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		resources, err := adm.DescribeTopicConfigs(ctx, c.strs("topics")...)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for _, r := range resources {
			if r.Err != nil {
				out[r.Name] = map[string]any{"error": errorKind(r.Err), "message": r.ErrMessage}
				continue
			}
			configs := map[string]any{}
			for _, cfg := range r.Configs {
				configs[cfg.Key] = map[string]any{"value": cfg.Value, "source": cfg.Source.String(),
					"synonyms": len(cfg.Synonyms)}
			}
			out[r.Name] = configs
		}
		return out, nil
	})
	// -> {group: {"state", "protocol_type", "type"}}
	handlers["admin.listGroups"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		groups, err := adm.ListGroups(ctx)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for name, g := range groups {
			out[name] = map[string]any{"state": g.State, "protocol_type": g.ProtocolType, "type": g.GroupType,
				"coordinator": g.Coordinator}
		}
		return out, nil
	})
	// {"groups": [...]} -> {group: {"state", "protocol", "members": [{"client_id", "assigned": {t: [p]}}]}}
	handlers["admin.describeGroups"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		groups, err := adm.DescribeGroups(ctx, c.strs("groups")...)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for name, g := range groups {
			members := []map[string]any{}
			for _, m := range g.Members {
				assigned := map[string][]int32{}
				if a, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range a.Topics {
						ps := append([]int32(nil), t.Partitions...)
						sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
						assigned[t.Topic] = ps
					}
				}
				members = append(members, map[string]any{"member_id": m.MemberID, "client_id": m.ClientID,
					"assigned": assigned})
			}
			out[name] = map[string]any{"state": g.State, "protocol_type": g.ProtocolType, "protocol": g.Protocol,
				"members": members, "error": errText(g.Err), "coordinator": g.Coordinator.NodeID}
		}
		return out, nil
	})
	// {"group", "require_stable"} -> {topic: {partition: offset}} (OffsetFetch)
	handlers["admin.fetchOffsets"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		if c.flag("require_stable", false) { // KIP-447: wait out pending transactional commits
			ctx = kadm.RequireStable(ctx)
		}
		offsets, err := adm.FetchOffsets(ctx, c.str("group"))
		if err != nil {
			return nil, err
		}
		if err := offsets.Error(); err != nil {
			return nil, err
		}
		out := map[string]map[string]any{}
		offsets.Each(func(o kadm.OffsetResponse) {
			if out[o.Topic] == nil {
				out[o.Topic] = map[string]any{}
			}
			out[o.Topic][fmt.Sprint(o.Partition)] = o.At
		})
		return out, nil
	})
	// {"topics": [...], "committed": bool} -> {topic: {partition: offset}} (ListOffsets latest,
	// or with read_committed isolation the last stable offset)
	handlers["admin.listEndOffsets"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		var listed kadm.ListedOffsets
		var err error
		if c.flag("committed", false) {
			listed, err = adm.ListCommittedOffsets(ctx, c.strs("topics")...)
		} else {
			listed, err = adm.ListEndOffsets(ctx, c.strs("topics")...)
		}
		if err != nil {
			return nil, err
		}
		if err := listed.Error(); err != nil {
			return nil, err
		}
		out := map[string]map[string]any{}
		listed.Each(func(o kadm.ListedOffset) {
			if out[o.Topic] == nil {
				out[o.Topic] = map[string]any{}
			}
			out[o.Topic][fmt.Sprint(o.Partition)] = o.Offset
		})
		return out, nil
	})
}

func init() {
	// KIP-848 groups (ConsumerGroupDescribe): {"groups": [...]} -> {group: {"state", "epoch",
	// "assignor", "members": [{"member_id", "client_id", "epoch", "assigned": {t: [p]}}]}}
	handlers["admin.describeConsumerGroups"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		groups, err := adm.DescribeConsumerGroups(ctx, c.strs("groups")...)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for name, g := range groups {
			members := []map[string]any{}
			for _, m := range g.Members {
				assigned := map[string][]int32{}
				for _, tp := range m.Assignment.Sorted() {
					assigned[tp.Topic] = tp.Partitions
				}
				members = append(members, map[string]any{"member_id": m.MemberID, "client_id": m.ClientID,
					"epoch": m.MemberEpoch, "assigned": assigned})
			}
			out[name] = map[string]any{"state": g.State, "epoch": g.Epoch, "assignor": g.AssignorName,
				"members": members, "error": errText(g.Err)}
		}
		return out, nil
	})
}

// topicsSet reads {"topic": [partitions]} (an empty list: every partition).
func topicsSet(c command, key string) kadm.TopicsSet {
	s := kadm.TopicsSet{}
	for topic, raw := range c.sub(key) {
		ps := []int32{}
		for _, p := range raw.([]any) {
			ps = append(ps, int32(p.(float64)))
		}
		s.Add(topic, ps...)
	}
	return s
}

func init() {
	// {"offsets": {topic: {partition: offset}}} -> {topic: {partition: low watermark | error}}
	handlers["admin.deleteRecords"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		offsets := kadm.Offsets{}
		for topic, ps := range c.sub("offsets") {
			for p, at := range ps.(map[string]any) {
				var partition int32
				fmt.Sscan(p, &partition)
				offsets.Add(kadm.Offset{Topic: topic, Partition: partition, At: int64(at.(float64))})
			}
		}
		deleted, err := adm.DeleteRecords(ctx, offsets)
		if err != nil {
			return nil, err
		}
		out := map[string]map[string]any{}
		deleted.Each(func(r kadm.DeleteRecordsResponse) {
			if out[r.Topic] == nil {
				out[r.Topic] = map[string]any{}
			}
			if r.Err != nil {
				out[r.Topic][fmt.Sprint(r.Partition)] = errorKind(r.Err)
			} else {
				out[r.Topic][fmt.Sprint(r.Partition)] = r.LowWatermark
			}
		})
		return out, nil
	})
	// {"topics": [...]} -> {topic: {partition: offset}} (ListOffsets earliest)
	handlers["admin.listStartOffsets"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		listed, err := adm.ListStartOffsets(ctx, c.strs("topics")...)
		if err != nil {
			return nil, err
		}
		if err := listed.Error(); err != nil {
			return nil, err
		}
		out := map[string]map[string]any{}
		listed.Each(func(o kadm.ListedOffset) {
			if out[o.Topic] == nil {
				out[o.Topic] = map[string]any{}
			}
			out[o.Topic][fmt.Sprint(o.Partition)] = o.Offset
		})
		return out, nil
	})
	// {"topics": [...], "count": n} -> {topic: error | null} (CreatePartitions to n in all)
	handlers["admin.updatePartitions"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		resps, err := adm.UpdatePartitions(ctx, int(c.num("count", 1)), c.strs("topics")...)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for topic, r := range resps {
			out[topic] = errText(r.Err)
		}
		return out, nil
	})
	// {"topics": [...]} -> {topic: error | null}
	handlers["admin.deleteTopics"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		resps, err := adm.DeleteTopics(ctx, c.strs("topics")...)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for topic, r := range resps {
			out[topic] = errText(r.Err)
		}
		return out, nil
	})
	// {"groups": [...]} -> {group: error | null}
	handlers["admin.deleteGroups"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		resps, err := adm.DeleteGroups(ctx, c.strs("groups")...)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for group, r := range resps {
			out[group] = errText(r.Err)
		}
		return out, nil
	})
	// {"partitions": {topic: [p...]}} -> [{"topic", "partition", "producer_id", "epoch", "last_sequence", "txn_start"}]
	handlers["admin.describeProducers"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		described, err := adm.DescribeProducers(ctx, topicsSet(c, "partitions"))
		if err != nil {
			return nil, err
		}
		out := []map[string]any{}
		for _, p := range described.SortedPartitions() {
			if p.Err != nil {
				out = append(out, map[string]any{"topic": p.Topic, "partition": p.Partition, "error": errorKind(p.Err)})
			}
		}
		for _, p := range described.SortedProducers() {
			out = append(out, map[string]any{"topic": p.Topic, "partition": p.Partition, "producer_id": p.ProducerID,
				"epoch": p.ProducerEpoch, "last_sequence": p.LastSequence, "txn_start": p.CurrentTxnStartOffset})
		}
		return out, nil
	})
	// -> {txn id: {"state", "producer_id"}} (ListTransactions), and with "describe" DescribeTransactions
	handlers["admin.listTransactions"] = adminCall(func(ctx context.Context, adm *kadm.Client, c command) (any, error) {
		listed, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for id, t := range listed {
			out[id] = map[string]any{"state": t.State, "producer_id": t.ProducerID}
		}
		if ids := c.strs("describe"); len(ids) > 0 {
			described, err := adm.DescribeTransactions(ctx, ids...)
			if err != nil {
				return nil, err
			}
			for id, t := range described {
				topics := map[string][]int32{}
				for _, tp := range t.Topics.Sorted() {
					topics[tp.Topic] = tp.Partitions
				}
				out["describe:"+id] = map[string]any{"state": t.State, "producer_id": t.ProducerID,
					"epoch": t.ProducerEpoch, "timeout_ms": t.TimeoutMillis, "topics": topics, "error": errText(t.Err)}
			}
		}
		return out, nil
	})
}
