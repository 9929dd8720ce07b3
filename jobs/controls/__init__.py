"""What a person sets per type: what every accept obeys (type timeouts ``type_timeouts``,
pausing ``pausing``, concurrency and rate limits ``limits``, fair turns between job keys
``fairness``), how long finished jobs are kept (``retention``) and cron expressions
(``cron``)."""
