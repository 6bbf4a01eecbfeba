"""Why a failover translation or resume cannot go on; each names what to do."""

from __future__ import annotations


class FailoverError(ValueError):
    """A failover rule was broken: bad names, bad sync bytes, or a position that cannot be found."""


class OffsetSyncDecodeError(FailoverError):
    """A record of the offset-syncs topic does not have MM2's layout."""


class ResumeError(FailoverError):
    """The exact resume point could not be determined; nothing should be written."""


class FingerprintNotFound(ResumeError):
    """The last written record is not in the window where its copy must be."""


class ReplicaPending(FingerprintNotFound):
    """The window is open-ended and does not hold the record yet: MM2 may still be copying it."""


class AmbiguousFingerprint(ResumeError):
    """Several records of the window carry the fingerprint: which one was written is unknown."""
