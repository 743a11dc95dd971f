"""Secrets never printed: `redact` masks passwords and keys in any text bound for a message or a log line.

What is masked:

- the password of a URL (`scheme://user:PASSWORD@host`), and a `password=` setting of a libpq key/value
  string or a URL's query;
- API keys by their shape: this project's bearer keys (`mp_…`), OpenAI-style keys (`sk-…`), and whatever
  follows `Bearer ` or `api_key=`;
- the exact secrets of the environment (OPENAI_API_KEY, the password in DATABASE_URL) and any passed in.

`install_redaction()` (the CLI calls it first) makes every log record and an uncaught exception's traceback go
through `redact`, so a library or a dependency quoting a URL or a key cannot print it either.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import traceback
from urllib.parse import unquote, urlsplit

MASK = "***"
MIN_SECRET_CHARS = 6  # shorter exact secrets are not searched for: masking them would garble ordinary words

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # scheme://user:password@host  (the password may hold any character but '@' and whitespace)
    (re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)[^\s@]+(?=@)"), rf"\g<head>{MASK}"),
    # password=value in key/value connection strings and URL queries ('quoted' values too)
    (re.compile(r"(?P<head>\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;'\"]+)", re.IGNORECASE), rf"\g<head>{MASK}"),
    (re.compile(r"(?P<head>\b(?:api[_-]?key|access[_-]?token)\s*[=:]\s*['\"]?)[^\s&;'\",]+", re.IGNORECASE),
     rf"\g<head>{MASK}"),
    (re.compile(r"(?P<head>\bBearer\s+)[^\s'\",]+", re.IGNORECASE), rf"\g<head>{MASK}"),
    (re.compile(r"\bmp_[A-Za-z0-9_-]{8,}"), f"mp_{MASK}"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), f"sk-{MASK}"),
]


def url_password(url: str | None) -> str | None:
    """The password in a database URL (URI or key/value form), if any."""
    if not url:
        return None
    try:
        if "://" in url:
            password = urlsplit(url).password
            return unquote(password) if password else None
    except ValueError:  # a malformed URI: take what sits between the user's ':' and the '@'
        pass
    m = re.search(r"://[^\s:/@]*:([^\s@]+)@", url) or re.search(r"\bpassword\s*=\s*'?([^\s']+)", url, re.I)
    return m.group(1) if m else None


def environment_secrets() -> tuple[str, ...]:
    """The secrets the environment configures: OPENAI_API_KEY and the password of DATABASE_URL."""
    return _secrets(os.environ.get("OPENAI_API_KEY"), os.environ.get("DATABASE_URL"))


@functools.lru_cache(maxsize=8)
def _secrets(key: str | None, url: str | None) -> tuple[str, ...]:
    """Parsed once per value: `redact` runs on every log line of a server."""
    return tuple(s for s in (key, url_password(url)) if s)


def redact(text: str, *secrets: str | None) -> str:
    """`text` with passwords and keys masked (see the module docstring); `secrets` are masked wherever they
    appear, as are the environment's."""
    if not text:
        return text
    for secret in sorted({s for s in (*secrets, *environment_secrets()) if s and len(s) >= MIN_SECRET_CHARS},
                         key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_url(url: str) -> str:
    """A URL with its password masked (the rest kept, for messages that must name the server)."""
    return redact(url, url_password(url))


# -- every log line and traceback -------------------------------------------------------------------------------

_installed = False


def _redact_record(record: logging.LogRecord, message: str) -> None:
    """Mask a record's secrets, keeping its arguments' shape where that suffices: formatters such as uvicorn's
    access log read `record.args` themselves (a record without them fails to print at all)."""
    if isinstance(record.args, tuple) and isinstance(record.msg, str):
        record.msg = redact(record.msg)
        record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        try:
            if redact(record.getMessage()) == record.getMessage():
                return
        except Exception:
            pass
    record.msg, record.args = redact(message), None


def install_redaction() -> None:
    """Mask secrets in every log record from now on (the message with its arguments, and an exception's
    traceback) and in the traceback of an uncaught exception. Idempotent."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def redacting_record(*args, **kwargs) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: let the handler report it as usual
            return record
        if redact(message) != message:
            _redact_record(record, message)
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        return record

    logging.setLogRecordFactory(redacting_record)
    previous_hook = sys.excepthook

    def redacting_hook(exc_type, exc, tb) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            previous_hook(exc_type, exc, tb)
            return
        sys.stderr.write(redact("".join(traceback.format_exception(exc_type, exc, tb))))

    sys.excepthook = redacting_hook


def check_url(url: str) -> None:
    """ConfigError, one line without the password, for a database URL psycopg cannot parse (psycopg's own
    message quotes the whole URL, password included)."""
    import psycopg

    from .errors import ConfigError

    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        reason = redact(" ".join(str(exc).split()), url_password(url))
        raise ConfigError(
            f"DATABASE_URL is not a valid PostgreSQL URL ({reason}). Fix: write it "
            "as postgresql://user:password@host:5432/dbname (percent-encode special characters in the password), "
            "or unset it to use the embedded server."
        ) from None
