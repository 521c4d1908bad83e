"""The light client of decisionflow: generated stubs (``v1``), identities, the shared vocabulary,
reasons and the rich status read back, retry policies, channels and the clients (``client``).

Every module importable as ``decisionflow.*`` belongs to this distribution (``decisionflow-client``);
the servers' own code is ``decisionflow_server`` and the services, in the server distribution.
"""
