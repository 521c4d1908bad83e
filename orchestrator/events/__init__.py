"""The event feed (docs/events.md): WatchEvents over the sequenced audit log. ``feed`` holds the process's
one reader of the log and the watch use case; ``grpc_api`` the EventService servicer."""
