"""Connection strings for messages: the one place that hides their secrets.

Every message or log line that shows where a job connects (a libpq DSN, a Postgres URI, a
metastore's JDBC URL) passes it through ``mask_dsn`` first: the host, port, user and database stay
readable, a password never reaches a terminal, a log file or a CI transcript.
"""

from __future__ import annotations

import re

MASK = "********"

# libpq's keywords whose value is a secret.
SECRET_KEYS = frozenset({"password", "sslpassword"})

UNPARSABLE = "<a connection string that does not parse; not shown, it may hold a password>"

# A URL's userinfo password (scheme://user:secret@host) and a password parameter in its query or
# in JDBC's ;key=value properties.
_URL_USERINFO = re.compile(r"(?P<head>//[^/@:?#;]*:)[^/@?#;]*(?P<tail>@)")
_URL_PARAM = re.compile(r"(?P<head>[?&;](?:" + "|".join(sorted(SECRET_KEYS)) + r")=)[^&;#]*", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """``dsn`` with every secret replaced by ``MASK``.

    A libpq connection string (``key=value`` pairs with their quoting, or a ``postgresql://`` /
    ``postgres://`` URI, password in the userinfo or the query) is parsed by libpq's own parser and
    shown as ``key=value`` pairs; one that does not parse is not shown at all (libpq's parse error
    quotes a piece of it, which may be the password). Any other URL (a metastore's
    ``jdbc:...``) keeps its shape, with the password of its userinfo and of its parameters masked."""
    if not dsn:
        return dsn
    if re.match(r"[a-z][a-z0-9+.-]*:", dsn, re.IGNORECASE) and not re.match(
        r"postgres(?:ql)?://", dsn, re.IGNORECASE
    ):
        return _URL_PARAM.sub(rf"\g<head>{MASK}", _URL_USERINFO.sub(rf"\g<head>{MASK}\g<tail>", dsn))
    from psycopg import conninfo

    try:
        params = conninfo.conninfo_to_dict(dsn)
    except Exception:  # psycopg.ProgrammingError: libpq could not parse it
        return UNPARSABLE
    return conninfo.make_conninfo(**{k: MASK if k in SECRET_KEYS else v for k, v in params.items()})
