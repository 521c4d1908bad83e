"""The leaves every layer above may use: settings, start-up errors, the exposure check, strict JSON,
log set-up, token files, arguments, payloads and page tokens. Imports no other layer."""
