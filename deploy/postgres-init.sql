-- Each service owns its database (DESIGN.md section 2): one for the receiver, one shared by the
-- orchestrator replicas.
CREATE DATABASE receiver;
CREATE DATABASE orchestrator;
