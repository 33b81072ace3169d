"""The error an ingestion run stops with (the landing zone's own is ``landing.LandingError``)."""


class IngestError(RuntimeError):
    """A run cannot go on; the message is one line for the user."""
