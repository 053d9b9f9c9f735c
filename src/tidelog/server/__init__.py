"""The asyncio shell: listeners, request dispatch, timers, processes."""
