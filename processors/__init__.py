"""Worker loops, task behaviors, distributed partition operations and the Spark pipeline."""
