"""Watching the store: following a job's changes (``subscriptions`` and its ``notifier``),
the workers registry (``workers``) and the store's status (``status``, with the range reads
of ``status_ranges``)."""
