"""Keeping the store, through the queue's own calls: the ticks of cron schedules enqueued
(``schedules``), finished jobs pruned past their retention (``pruning``), jobs whose row
cannot be read removed (``repair``)."""
