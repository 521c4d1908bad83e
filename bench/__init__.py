"""The decisionflow benchmark: ``python -m bench`` (``make bench``; ``make bench QUICK=1`` for a short run).

Real servers run as separate processes; the bench process drives them with grpc.aio stubs and compares
every throughput with a bare two-hop gRPC chain measured in interleaved rounds on the same machine.
"""
