"""What every serving process is made of: the host, serving and the one interceptor per served call,
authentication, admission and the connection guard, metrics, workers, the access log, the status
mapping, tracing and failpoints. Imports storage and foundation, never apps."""
