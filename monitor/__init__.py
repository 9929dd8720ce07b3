"""Activity monitor, subscription notifier and status surface (CLI, HTTP, metrics)."""
