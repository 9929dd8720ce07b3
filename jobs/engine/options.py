"""``tr.options`` of the embedded engine: the bindings' transaction options, each with its
meaning here."""

from __future__ import annotations

import weakref

from fdb.fdboptions import TransactionOption

from . import errors as E
from .errors import FDBError

from .limits import TRANSACTION_SIZE_LIMIT


class TransactionOptions:
    """``tr.options``: the bindings' transaction options (``fdb.fdboptions``), each with
    its meaning on this engine.  A name the bindings do not have is an AttributeError, as
    there; an option this engine cannot honour is refused (2000), never ignored."""

    # Options that change nothing here: scheduling, tracing, throttling and durability
    # tuning of a cluster (this engine has one process and FDB's strictest semantics).
    NO_EFFECT = frozenset({
        "authorization_token", "auto_throttle_tag", "automatic_idempotency", "bypass_storage_quota",
        "causal_read_disable", "causal_read_risky", "causal_write_risky", "debug_retry_logging",
        "debug_transaction_identifier", "durability_datacenter", "durability_dev_null_is_web_scale",
        "durability_risky", "expensive_clear_cost_estimation_enable", "include_port_in_address",
        "lock_aware", "log_transaction", "priority_batch", "priority_system_immediate",
        "read_ahead_disable", "read_lock_aware", "read_priority_high", "read_priority_low",
        "read_priority_normal", "read_server_side_cache_disable", "read_server_side_cache_enable",
        "report_conflicting_keys", "server_request_tracing", "span_parent", "tag",
        "transaction_logging_enable", "transaction_logging_max_field_length", "use_grv_cache",
        "use_provisional_proxies", "used_during_commit_protection_disable",
    })

    def __init__(self, tr):
        self._tr = weakref.proxy(tr)  # no cycle: a dropped transaction is destroyed at once

    def set_timeout(self, milliseconds: int) -> None:
        if milliseconds < 0:
            raise FDBError(E.INVALID_OPTION_VALUE)
        self._tr._timeout = milliseconds / 1000 if milliseconds else None

    def set_retry_limit(self, limit: int) -> None:
        self._tr._retry_limit = None if limit < 0 else limit

    def set_max_retry_delay(self, milliseconds: int) -> None:
        """The longest backoff of ``on_error`` (FoundationDB's default: 1 s); a current
        backoff above it is clamped to it.  Kept across ``on_error``, cleared by ``reset``."""
        if milliseconds < 0:
            raise FDBError(E.INVALID_OPTION_VALUE)
        tr = self._tr
        tr._max_backoff = milliseconds / 1000
        tr._backoff = min(tr._backoff, tr._max_backoff)

    def set_size_limit(self, size: int) -> None:
        if not 32 <= size <= TRANSACTION_SIZE_LIMIT:
            raise FDBError(E.INVALID_OPTION_VALUE, f"size_limit must be 32 to {TRANSACTION_SIZE_LIMIT}")
        self._tr._size_limit = size

    def set_read_your_writes_disable(self) -> None:
        tr = self._tr
        if tr._rv is not None or tr._log:  # FoundationDB: only before any read or write
            raise FDBError(E.CLIENT_INVALID_OPERATION, "read_your_writes_disable must be set before reads and writes")
        tr._ryw = False

    def set_snapshot_ryw_disable(self) -> None:
        self._tr._snapshot_ryw = False

    def set_snapshot_ryw_enable(self) -> None:
        self._tr._snapshot_ryw = True

    def set_next_write_no_write_conflict_range(self) -> None:
        self._tr._next_no_conflict = True

    def __getattr__(self, name):
        option = name[4:] if name.startswith("set_") else None
        if option not in TransactionOption:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        if option in self.NO_EFFECT:
            return lambda *args: None
        raise FDBError(E.CLIENT_INVALID_OPERATION, f"transaction option {option!r} is not supported by the embedded engine")
