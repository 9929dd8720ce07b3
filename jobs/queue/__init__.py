"""The queue: a job's row through its states.  Adding and removing (``creator``), accepting
(``accepting``), updating and finishing (``worker``), reading (``reading``), the row and its
activity index (``rows``), the index of finished jobs (``finished``) and finding inactive
running jobs (``activity``)."""
