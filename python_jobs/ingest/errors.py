"""The error an ingestion run stops with (the landing zone's own is ``landing.LandingError``), and how an
exception is put in one line of it."""


class IngestError(RuntimeError):
    """A run cannot go on; the message is one line for the user."""


def first_line(exc: BaseException) -> str:
    """An exception as one line: the first line of its text (py4j's carry the JVM's stack after it)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
