// KafkaJS against tidelog: the driver that tests/interop/test_kafkajs.py runs.
//
// One JSON command a line on stdin ({"id", "op", ...}), one answer a line on stdout
// ({"id", "ok", "result" | "error", "message", "ms"}), as the Java and Go drivers
// (interop/java, interop/go) answer. Producers, consumers and admin clients are kept by
// name. A consumer runs KafkaJS's eachMessage loop from the moment it is created; what it
// receives waits in a buffer until a "poll" takes it, and "commit" commits the position
// after the last record polled from each partition it holds. Commands run one after the
// other. KafkaJS's log lines go to stderr.
'use strict'

const fs = require('fs')
const readline = require('readline')
const { Kafka, CompressionTypes, ConfigResourceTypes, logLevel } = require('kafkajs')
const { version } = require('kafkajs/package.json')

const producers = new Map()
const consumers = new Map()
const admins = new Map()
const backgrounds = new Map()

const logCreator = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`${new Date().toISOString()} [${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}

// librdkafka's security names, as `cluster up --secure` writes them in client.properties
// (c.security): TLS with the PEM CA in ssl.ca.location, SASL SCRAM-SHA-512/256 or PLAIN.
function security (settings) {
  if (!settings) return {}
  const protocol = settings['security.protocol'] || 'PLAINTEXT'
  const out = {}
  if (protocol === 'SSL' || protocol === 'SASL_SSL') {
    out.ssl = settings['ssl.ca.location'] ? { ca: [fs.readFileSync(settings['ssl.ca.location'], 'utf-8')] } : true
  }
  if (protocol === 'SASL_SSL' || protocol === 'SASL_PLAINTEXT') {
    out.sasl = {
      mechanism: settings['sasl.mechanism'].toLowerCase(),
      username: settings['sasl.username'],
      password: settings['sasl.password']
    }
  }
  return out
}

function kafka (c) {
  return new Kafka({
    ...security(c.security),
    clientId: c.client_id || `tidelog-kafkajs-${c.name}`,
    brokers: c.brokers,
    logLevel: logLevel.INFO,
    logCreator,
    retry: { retries: c.retries ?? 8, initialRetryTime: 100 }
  })
}

function get (map, name, what) {
  const found = map.get(name)
  if (!found) throw new Error(`no ${what} named ${JSON.stringify(name)}`)
  return found
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

function message (r) {
  const headers = {}
  for (const [k, v] of r.headers || []) headers[k] = v
  return {
    key: r.key === undefined ? null : r.key,
    value: r.value === undefined ? null : r.value,
    partition: r.partition,
    headers
  }
}

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

// ---------------------------------------------------------------- producers

async function producerCreate (c) {
  const producer = kafka(c).producer({
    idempotent: c.idempotent ?? true,
    transactionalId: c.transactional_id,
    maxInFlightRequests: (c.idempotent ?? true) ? 1 : undefined,
    allowAutoTopicCreation: false
  })
  await producer.connect()
  producers.set(c.name, producer)
  return c.name
}

// The records' answers: KafkaJS answers a send with one entry per partition written
// (its base offset); records are sent in one call, so each partition's offsets run from it.
async function send (target, c) {
  const codec = CODECS[c.compression || 'none']
  if (codec === undefined) throw new Error(`compression ${c.compression} is not built into KafkaJS`)
  const acks = { all: -1, leader: 1, none: 0 }[c.acks || 'all']
  const answer = await target.send({
    topic: c.topic, acks, compression: codec, timeout: c.timeout_ms || 30000, messages: c.records.map(message)
  })
  return answer.map(r => ({ partition: r.partition, base_offset: Number(r.baseOffset), error: r.errorCode }))
}

// ---------------------------------------------------------------- consumers

async function consumerCreate (c) {
  const consumer = kafka(c).consumer({
    groupId: c.group,
    sessionTimeout: c.session_timeout_ms || 6000,
    heartbeatInterval: c.heartbeat_interval_ms || 500,
    rebalanceTimeout: c.rebalance_timeout_ms || 10000,
    readUncommitted: !c.read_committed,
    maxWaitTimeInMs: 500
  })
  const state = { consumer, buffered: [], assigned: {}, joins: 0, generation: -1, polled: new Map(), crashed: null }
  consumer.on(consumer.events.GROUP_JOIN, e => {
    state.assigned = e.payload.memberAssignment
    state.joins += 1
  })
  consumer.on(consumer.events.CRASH, e => { state.crashed = String(e.payload.error) })
  await consumer.connect()
  await consumer.subscribe({ topics: c.topics, fromBeginning: c.from_beginning ?? true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      const headers = Object.entries(message.headers || {}).map(([k, v]) => [k, v === undefined ? null : v.toString()])
      state.buffered.push({
        topic,
        partition,
        offset: Number(message.offset),
        key: message.key === null ? null : message.key.toString(),
        value: message.value === null ? null : message.value.toString(),
        headers
      })
    }
  })
  consumers.set(c.name, state)
  return c.name
}

// Takes what the named consumers received until count records between them (or timeout_ms).
async function poll (c) {
  const names = c.names || [c.name]
  const states = names.map(name => get(consumers, name, 'consumer'))
  const deadline = Date.now() + (c.timeout_ms || 30000)
  const total = () => states.reduce((n, s) => n + s.buffered.length, 0)
  while (total() < (c.count || 1) && Date.now() < deadline) await sleep(20)
  const records = {}
  names.forEach((name, i) => {
    const state = states[i]
    records[name] = state.buffered
    state.buffered = []
    for (const r of records[name]) state.polled.set(`${r.topic}\u0000${r.partition}`, r.offset + 1)
  })
  return { records, crashed: states.filter(s => s.crashed).map(s => s.crashed) }
}

// Commits the position after the last record polled from each partition the member holds.
async function commit (c) {
  const state = get(consumers, c.name, 'consumer')
  const offsets = []
  for (const [topic, partitions] of Object.entries(state.assigned)) {
    for (const partition of partitions) {
      const next = state.polled.get(`${topic}\u0000${partition}`)
      if (next !== undefined) offsets.push({ topic, partition, offset: String(next) })
    }
  }
  await state.consumer.commitOffsets(offsets)
  return offsets.map(o => ({ ...o, offset: Number(o.offset) }))
}

// ---------------------------------------------------------------- admin

async function admin (name) {
  if (!admins.has(name)) throw new Error(`no admin named ${JSON.stringify(name)}`)
  return admins.get(name)
}

const ops = {
  'producer.create': producerCreate,
  'producer.send': async c => send(get(producers, c.name, 'producer'), c),
  'producer.close': async c => { await get(producers, c.name, 'producer').disconnect(); producers.delete(c.name) },

  // A transaction: its sends, then commit or abort; sendOffsets commits a group's offsets in it.
  'txn.run': async c => {
    const producer = get(producers, c.name, 'producer')
    const txn = await producer.transaction()
    const sent = []
    try {
      for (const batch of c.sends || []) sent.push(await send(txn, batch))
      if (c.offsets) await txn.sendOffsets({ consumerGroupId: c.offsets.group, topics: c.offsets.topics })
    } catch (e) {
      await txn.abort()
      throw e
    }
    if (c.commit) await txn.commit(); else await txn.abort()
    return sent
  },

  // A producer that keeps sending one record at a time until produce.stop: record i goes
  // to partition i % partitions as "<prefix>-<i>"; each acknowledgement is kept with its offset.
  'produce.start': async c => {
    const producer = get(producers, c.name, 'producer')
    const bg = { stopped: false, acked: [], failed: [], sent: 0 }
    backgrounds.set(c.name, bg)
    bg.done = (async () => {
      const deadline = Date.now() + 5 * 60 * 1000
      for (let i = 0; !bg.stopped && Date.now() < deadline && i < 100000; i++) {
        const value = `${c.prefix || 'bg'}-${i}`
        bg.sent += 1
        try {
          const [answer] = await producer.send({
            topic: c.topic, acks: -1, messages: [{ value, partition: i % (c.partitions || 1) }]
          })
          bg.acked.push({ value, partition: answer.partition, offset: Number(answer.baseOffset) })
        } catch (e) {
          bg.failed.push(`${value}: ${errorName(e)}: ${e.message}`)
        }
      }
    })()
    return null
  },
  'produce.stop': async c => {
    const bg = backgrounds.get(c.name)
    if (!bg) throw new Error(`no background producer on ${c.name}`)
    if (c.progress) return { sent: bg.sent, acked: bg.acked.length, failed: bg.failed.length }
    bg.stopped = true
    await bg.done
    backgrounds.delete(c.name)
    return { sent: bg.sent, acked: bg.acked, failed: bg.failed }
  },

  'consumer.create': consumerCreate,
  poll,
  commit,
  assignment: async c => {
    const state = get(consumers, c.name, 'consumer')
    return { assigned: state.assigned, joins: state.joins }
  },
  'consumer.close': async c => { await get(consumers, c.name, 'consumer').consumer.disconnect(); consumers.delete(c.name) },

  'admin.create': async c => {
    const client = kafka(c).admin()
    await client.connect()
    admins.set(c.name, client)
    return c.name
  },
  'admin.close': async c => { await (await admin(c.name)).disconnect(); admins.delete(c.name) },
  // {"topics": [{"name", "partitions", "replication_factor", "configs"}]} -> true when all were created
  'admin.createTopics': async c => (await admin(c.name)).createTopics({
    waitForLeaders: true,
    topics: c.topics.map(t => ({
      topic: t.name,
      numPartitions: t.partitions,
      replicationFactor: t.replication_factor,
      configEntries: Object.entries(t.configs || {}).map(([name, value]) => ({ name, value: String(value) }))
    }))
  }),
  'admin.listTopics': async c => (await (await admin(c.name)).listTopics()).sort(),
  'admin.fetchTopicMetadata': async c => (await (await admin(c.name)).fetchTopicMetadata({ topics: c.topics })).topics,
  'admin.fetchTopicOffsets': async c => (await (await admin(c.name)).fetchTopicOffsets(c.topic))
    .map(p => ({ partition: p.partition, offset: Number(p.offset), high: Number(p.high), low: Number(p.low) }))
    .sort((a, b) => a.partition - b.partition),
  'admin.fetchOffsets': async c => {
    const found = await (await admin(c.name)).fetchOffsets({ groupId: c.group, topics: c.topics })
    const out = {}
    for (const t of found) {
      out[t.topic] = {}
      for (const p of t.partitions) out[t.topic][p.partition] = Number(p.offset)
    }
    return out
  },
  'admin.listGroups': async c => (await (await admin(c.name)).listGroups()).groups,
  'admin.describeGroups': async c => (await (await admin(c.name)).describeGroups(c.groups)).groups.map(g => ({
    group: g.groupId,
    state: g.state,
    protocol_type: g.protocolType,
    protocol: g.protocol,
    error: g.errorCode,
    members: g.members.map(m => ({ member_id: m.memberId, client_id: m.clientId }))
  })),
  'admin.describeCluster': async c => (await admin(c.name)).describeCluster(),
  'admin.createPartitions': async c => (await admin(c.name)).createPartitions({
    topicPartitions: [{ topic: c.topic, count: c.count }]
  }),
  // {"topic", "partitions": [{"partition", "offset"}]}: DeleteRecords up to each offset (-1: the end)
  'admin.deleteTopicRecords': async c => (await admin(c.name)).deleteTopicRecords({
    topic: c.topic, partitions: c.partitions.map(p => ({ partition: p.partition, offset: String(p.offset) }))
  }),
  'admin.deleteTopics': async c => (await admin(c.name)).deleteTopics({ topics: c.topics }),
  'admin.deleteGroups': async c => (await admin(c.name)).deleteGroups(c.groups),
  // An empty group's offsets set (OffsetCommit outside a generation) or reset to the earliest.
  'admin.setOffsets': async c => (await admin(c.name)).setOffsets({
    groupId: c.group, topic: c.topic, partitions: c.partitions.map(p => ({ partition: p.partition, offset: String(p.offset) }))
  }),
  'admin.resetOffsets': async c => (await admin(c.name)).resetOffsets({ groupId: c.group, topic: c.topic, earliest: true }),
  'admin.alterTopicConfig': async c => (await admin(c.name)).alterConfigs({
    validateOnly: false,
    resources: [{ type: ConfigResourceTypes.TOPIC, name: c.topic, configEntries: Object.entries(c.configs).map(([name, value]) => ({ name, value: String(value) })) }]
  }),
  'admin.describeTopicConfigs': async c => {
    const described = await (await admin(c.name)).describeConfigs({
      includeSynonyms: false,
      resources: c.topics.map(name => ({ type: ConfigResourceTypes.TOPIC, name }))
    })
    const out = {}
    for (const r of described.resources) {
      out[r.resourceName] = { error: r.errorCode, configs: {} }
      for (const e of r.configEntries) out[r.resourceName].configs[e.configName] = e.configValue
    }
    return out
  }
}

async function closeAll () {
  for (const s of consumers.values()) await s.consumer.disconnect().catch(() => {})
  for (const p of producers.values()) await p.disconnect().catch(() => {})
  for (const a of admins.values()) await a.disconnect().catch(() => {})
}

function errorName (e) {
  // KafkaJS's protocol errors carry Kafka's name (type); others their class name.
  return e.type || e.name || 'Error'
}

async function main () {
  const out = line => process.stdout.write(JSON.stringify(line) + '\n')
  out({ ready: true, kafkajs: version })
  const lines = readline.createInterface({ input: process.stdin, terminal: false })
  for await (const line of lines) {
    let c
    try {
      c = JSON.parse(line)
    } catch (e) {
      out({ id: 0, ok: false, error: 'BadCommand', message: e.message })
      continue
    }
    if (c.op === 'exit') break
    const started = Date.now()
    try {
      const op = ops[c.op]
      if (!op) throw new Error(`unknown op ${JSON.stringify(c.op)}`)
      const result = await op(c)
      out({ id: c.id, ok: true, result: result === undefined ? null : result, ms: Date.now() - started })
    } catch (e) {
      out({ id: c.id, ok: false, error: errorName(e), message: String(e.message || e), ms: Date.now() - started })
    }
  }
  await closeAll()
  process.exit(0)
}

main()
