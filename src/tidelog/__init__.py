"""tidelog: a Kafka-compatible, replicated, partitioned commit log in Python."""

__version__ = "0.1.0"
