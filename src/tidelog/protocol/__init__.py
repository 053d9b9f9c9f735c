"""The Kafka wire protocol: a thin, version-agnostic wrapper over ``kio``."""
