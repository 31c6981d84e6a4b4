"""The lifecycle's shared constant: the watcher tick of a kind that names none. The managed
connectors name their own (``managed.WATCH_TICK_SECONDS``), which connop's watcher uses."""

WATCH_INTERVAL_SECONDS: float = 5.0
