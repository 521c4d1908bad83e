"""What a person runs beside the services: the ``decisionflow`` command, the review console, the demo
and the trial identity provider. Imports from every layer below; nothing imports it."""
