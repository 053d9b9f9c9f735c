"""Partition state (HW, ISR), fetchers, purgatory, replica manager (docs/replication.md)."""
