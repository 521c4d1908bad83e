"""What every serving process is made of: the host, serving and the one interceptor per served call,
authentication, admission and the connection guard, metrics, workers, the access log, the status
mapping, tracing, failpoints and the shape of a housekeeping command. Imports storage and foundation."""
