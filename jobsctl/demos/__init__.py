"""The demos: the job queue alone (``queue``) and the Spark pipeline (``pipeline``)."""
