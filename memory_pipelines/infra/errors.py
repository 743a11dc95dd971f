"""Errors a user can act on: the CLI prints their message (cause and fix) without a traceback."""

import re
import unicodedata


class UserError(Exception):
    """An expected failure with a one-line message that names the cause and the fix."""


class ConfigError(UserError):
    """Configuration is missing, wrong or inconsistent (URL, key, dimension)."""


class ValidationError(UserError, ValueError):
    """Input that breaks a rule; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFoundError(UserError, LookupError):
    """No such row for this owner (a row of another owner is reported the same way)."""


def check_printable(field: str, value: str) -> str:
    """Reject control characters in an identifier (an owner): nobody could type it again, and logs and terminals
    would show something else."""
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValidationError(field, "must not contain control characters")
    return value


# What shows nothing besides whitespace: control characters and the common invisible format characters (zero-width
# spaces and joiners, direction marks and isolates, the soft hyphen, the BOM); the HTTP schema's text pattern names
# the same class, so the two agree on what is blank.
INVISIBLE = r"\u0001-\u001f\u007f-\u009f\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_BLANK_TEXT = re.compile(rf"[\s{INVISIBLE}]*")


def blank(value: str) -> bool:
    """Whether a text shows nothing: only whitespace and INVISIBLE characters."""
    return _BLANK_TEXT.fullmatch(value) is not None


def check_storable(field: str, value: str) -> str:
    """Reject text PostgreSQL cannot store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise ValidationError(field, "must not contain NUL (\\u0000) characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "must be valid Unicode text (no lone surrogates)") from None
    return value


def database_failed(exc: BaseException) -> str:
    """The words for a database failure (a restart, a lost connection) that cut a command short: its kind and the
    first line of its message."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"the database failed ({type(exc).__name__}{': ' + first if first else ''})"
