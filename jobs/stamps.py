"""Versionstamps as ages: how long ago a stamped change was committed, from how far its
commit version is behind a read version.  FoundationDB's versions advance about a million
a second, and so do the embedded engine's (they follow its clock)."""

from __future__ import annotations

FDB_VERSIONS_PER_SECOND = 1_000_000  # FoundationDB's nominal version rate
