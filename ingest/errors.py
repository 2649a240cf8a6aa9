class IngestRejected(Exception):
    """Permanent: the payload itself is wrong. The job fails with this message; no retry.

    The message is shown to people as is, so it must say what is wrong and where.
    """


class IngestTransient(Exception):
    """Temporary: worth retrying later (a lock, a lost connection)."""
