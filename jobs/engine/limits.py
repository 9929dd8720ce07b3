"""FoundationDB's documented limits ("Known limitations"), which the embedded engine keeps
with FoundationDB's error codes."""

KEY_SIZE_LIMIT = 10_000
VALUE_SIZE_LIMIT = 100_000
TRANSACTION_SIZE_LIMIT = 10_000_000
TRANSACTION_LIFETIME = 5.0  # seconds; read at run time (limits.TRANSACTION_LIFETIME) so tests may shorten it
MAX_WATCHES = 10_000  # the client's default limit of outstanding watches
