"""Every bound in tidelog, named in one place: there is a limit on everything.

Kafka's configurable defaults live with their configs; these are the hard limits
that protect the process from bad input or unbounded growth.
"""

# Record batches.
RECORD_BATCH_SIZE_MAX_BYTES = 1 << 30   # no batch, compressed or not, may claim more
RECORD_BATCH_DECOMPRESSED_SIZE_MAX_BYTES = 1 << 30  # a "zip bomb" stops here
RECORD_BATCH_RECORD_COUNT_MAX = 1 << 24  # records one batch may declare
RECORD_HEADER_COUNT_MAX = 1 << 16       # headers one record may declare

# Storage.
SEGMENT_SIZE_MAX_BYTES = (1 << 31) - 1  # positions in an index are int32
INDEX_SIZE_MAX_BYTES = 10 * 1024 * 1024  # Kafka's segment.index.bytes default
CHECKPOINT_ENTRY_COUNT_MAX = 1 << 22    # lines one checkpoint file may declare
CHECKPOINT_FILE_SIZE_MAX_BYTES = 256 * 1024 * 1024
CHECKPOINT_WRITE_EMFILE_BACKOFFS_MS = (10, 50, 200)  # waits before each retry of a write that hit EMFILE/ENFILE
PREFERRED_LOG_DIRS_MAX = 100_000        # AlterReplicaLogDirs wishes kept for partitions not hosted yet

# Network.
REQUEST_SIZE_MAX_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
CONNECTION_IN_FLIGHT_REQUESTS_MAX = 1000  # responses a connection may owe before we stop reading
CONNECTIONS_MAX_IDLE_MS = 600_000        # Kafka's connections.max.idle.ms
PURGATORY_OPERATIONS_MAX = 10_000        # delayed produce/fetch operations one purgatory holds
QUEUED_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # queued.max.request.bytes (Kafka: -1, unbounded)
MAX_CONNECTIONS = (1 << 31) - 1          # Kafka's max.connections and max.connections.per.ip defaults
CONNECTION_READ_AHEAD_BYTES = 64 * 1024  # a connection's stream buffer; reading pauses at twice this
LISTEN_BACKLOG = 100                     # connections the kernel queues while we are not accepting
ACCEPT_BACKOFF_MS = 100                  # pause in accepting after EMFILE/ENFILE (out of descriptors)
WRITE_BEHIND_MAX_BYTES = 16 * 1024 * 1024  # appends queued for the writer thread (server/write_behind.py) at most
WRITE_BEHIND_INLINE_BYTES = 64 * 1024      # a smaller append is written at once when nothing is queued
SENDFILE_MIN_BYTES = 16 * 1024            # a Fetch's records from this size go out by sendfile, smaller ones are copied
VOTER_LISTENERS_MAX = 16                # endpoints one AddRaftVoter / UpdateRaftVoter may name (KIP-853)
VOTER_HOST_LENGTH_MAX = 255             # a voter endpoint's host name (DNS's bound)
VOTER_CHANGE_TIMEOUT_MAX_MS = 600_000   # how long an AddRaftVoter may wait for the new voter to catch up
