"""Identity framing, the independent reference implementation and the identity command line."""
