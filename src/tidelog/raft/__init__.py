"""KRaft's pull-based Raft (KIP-595), sans-I/O: see ``replica.py`` and docs/raft.md."""
