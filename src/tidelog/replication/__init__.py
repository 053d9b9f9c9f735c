"""Partition state (HW, ISR), fetchers, purgatory, replica manager (SPEC §3–§7)."""
