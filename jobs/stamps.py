"""Versionstamps as ages: how long ago a stamped change was committed, from how far its
commit version is behind a read version.  FoundationDB's versions advance about a million
a second, and so do the embedded engine's (they follow its clock); an embedded store of an
earlier release counted commits instead, which say nothing of time."""

from __future__ import annotations

FDB_VERSIONS_PER_SECOND = 1_000_000  # FoundationDB's nominal version rate
TIMED_VERSIONS = 10**15  # embedded versions from here on measure time (10**15 µs: September 2001)


def versions_are_time(db):
    """For a version of ``db``, whether it measures time: always on FoundationDB; on the
    embedded engine (recognised by ``commit_version``, which the fault injecting wrapper
    forwards) once it is a clock's, not a commit counter's of an earlier release."""
    if not hasattr(db, "commit_version"):
        return lambda version: True
    return lambda version: version >= TIMED_VERSIONS
