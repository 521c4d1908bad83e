-- Each service owns its database (docs/architecture.md): one for the receiver, one shared by the
-- orchestrator replicas.
CREATE DATABASE receiver;
CREATE DATABASE orchestrator;
