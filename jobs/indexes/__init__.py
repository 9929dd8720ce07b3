"""The indexes the job layer keeps beside the job rows, each changed in the transaction that
changes a row: the queues of pending jobs (``pending``) with the places workers pick from
(``places``) and the wake-ups of waiting accepts (``wakeups``), the exact counts
(``counts``), the throughput and latency rates (``rates``) and the failed jobs
(``failed``)."""
