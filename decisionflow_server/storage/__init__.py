"""Databases: engines and URLs, transactions, group commit, migrations and schema compatibility.
Imports only foundation."""
