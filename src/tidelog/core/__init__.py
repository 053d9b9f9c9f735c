"""Ids, limits, clock and errors shared by every layer."""
