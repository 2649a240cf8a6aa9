"""What a job handler raises to tell the runner how it ended."""

from __future__ import annotations


class JobRejected(Exception):
    """Permanent: the input cannot be processed. The row fails with this message, which a
    person can act on; the job is not tried again."""


class JobTransient(Exception):
    """Temporary (a service away, a lock timeout): the job goes back to the queue and is
    tried again with back-off, up to TRUSTRANK_JOB_MAX_ATTEMPTS attempts."""


class JobsBusy(Exception):
    """Admission refused: the team already has as many queued jobs of this kind as it may,
    or the whole queue is past its soft limit. Answered 429 with Retry-After."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
