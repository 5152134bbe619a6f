"""Request lines as the logs show them: without the credentials a client put in them.

A client that puts its token in the query string (``?token=...``, ``?api_key=...``) sends a
secret the service never reads there, and uvicorn's access log would write it, with the path,
into every log file and log shipper downstream. :class:`CredentialFilter` rewrites each record
of the loggers it is installed on before any handler formats it: the value of every query
parameter whose name says it holds a credential, and every secret of the deployment's tokens
wherever it appears in the line, become ``[redacted]``. ``reef serve`` installs it on uvicorn's
access and error loggers (:func:`redact_request_lines`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import quote, quote_plus

__all__ = ["REDACTED", "CredentialFilter", "redact", "redact_request_lines"]

#: What a credential is written as.
REDACTED: Final = "[redacted]"

#: The loggers that write request lines: uvicorn's access log, and its error log (which names
#: the request of an exception).
REQUEST_LOGGERS: Final = ("uvicorn.access", "uvicorn.error")

# A query parameter whose name says it holds a credential: token, access_token, api_key,
# apikey, key, secret, password, passwd, pwd, auth, authorization, bearer, signature, sig,
# credential(s), session.
_CREDENTIAL_PARAMETER: Final = re.compile(
    r"(?i)([?&;](?:[\w.\-]*(?:token|secret|passw(?:or)?d|pwd|auth|bearer|credential|signature"
    r"|session|api[_\-]?key)[\w.\-]*|key|sig)=)[^&;#\s\"']*"
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the values of credential query parameters and every one of ``secrets``
    replaced by :data:`REDACTED`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return _CREDENTIAL_PARAMETER.sub(rf"\1{REDACTED}", text)


class CredentialFilter(logging.Filter):
    """Redacts (:func:`redact`) the message and every string argument of each record; never
    drops one.

    :param secrets: the deployment's token secrets.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        # As sent in a query string too (percent-encoded), the longest first, so a secret
        # that holds another is replaced whole.
        spelled = {form for s in secrets if s for form in (s, quote(s, safe=""), quote_plus(s))}
        self.secrets = tuple(sorted(spelled, key=len, reverse=True))

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, self.secrets)
        if isinstance(record.args, tuple):
            record.args = tuple(self._redacted(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: self._redacted(value) for key, value in record.args.items()}
        return True

    def _redacted(self, value: Any) -> Any:
        return redact(value, self.secrets) if isinstance(value, str) else value


def redact_request_lines(secrets: Iterable[str] = ()) -> CredentialFilter:
    """Install one :class:`CredentialFilter` on each of :data:`REQUEST_LOGGERS` (after
    uvicorn configured its logging: a configuration replaces handlers, not filters of a
    logger); returns it."""
    found = CredentialFilter(secrets)
    for name in REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, CredentialFilter)]:
            logger.removeFilter(old)
        logger.addFilter(found)
    return found
