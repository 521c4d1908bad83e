"""Reloading the credentials file into a running server (SIGHUP): issue or revoke a token without a
restart. A file that cannot be read or is malformed changes nothing: the server keeps the
credentials it has and logs an error naming the file."""

from __future__ import annotations

import logging
from pathlib import Path

from decisionflow_server.runtime.auth._credentials import Credentials, CredentialsError, StrPath, load_credentials
from decisionflow_server.runtime.auth._server import AuthInterceptor

logger = logging.getLogger("decisionflow.auth")


def principal_count(credentials: Credentials) -> int:
    """Return how many distinct principals the credentials name (by token or by certificate)."""
    names = {entry.principal for entry in credentials.tokens}
    names.update(entry.principal for entry in credentials.certificates)
    return len(names)


class CredentialsReloader:
    """Re-reads one credentials file into one AuthInterceptor each time it is called."""

    def __init__(self, path: StrPath, interceptor: AuthInterceptor) -> None:
        self._path = Path(path)
        self._interceptor = interceptor

    def __call__(self) -> bool:
        """Swap in the file's credentials and return True; on a bad file keep the old ones and return False."""
        try:
            credentials = load_credentials(self._path)
        except CredentialsError as error:
            # The message starts with the file's path and names the faulty entry.
            logger.error("credentials not reloaded, the previous ones stay in force: %s", error)
            return False
        self._interceptor.replace_credentials(credentials)
        logger.info(
            "credentials reloaded from %s: %d principals (%d tokens, %d certificate principals)",
            self._path,
            principal_count(credentials),
            len(credentials.tokens),
            len(credentials.certificates),
        )
        return True
