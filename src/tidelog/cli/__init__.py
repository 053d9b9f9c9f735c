"""Command-line tools: ``tidelog serve``, ``tidelog topics``, ``tidelog bench``."""
