"""FoundationDB's documented limits ("Known limitations") and client defaults, which the
embedded engine keeps, with FoundationDB's error codes."""

KEY_SIZE_LIMIT = 10_000
VALUE_SIZE_LIMIT = 100_000
TRANSACTION_SIZE_LIMIT = 10_000_000
TRANSACTION_LIFETIME = 5.0  # seconds; read at run time (limits.TRANSACTION_LIFETIME) so tests may shorten it
# on_error backoff, FoundationDB client defaults (read at run time: tests may shorten them)
INITIAL_BACKOFF = 0.01
MAX_BACKOFF = 1.0
MAX_WATCHES = 10_000  # the client's default limit of outstanding watches
