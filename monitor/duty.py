"""How the monitor's duties run: each is one pass (``check()``) made again and again, the
duty's own ``interval()`` after the last, on a daemon thread (``start()``/``stop()``) or
in an anyio task (``await duty.serve()``).  A pass that fails is logged and counted
(``errors``), and the next one comes all the same: a duty that died quietly would leave
its work undone for good (a dead worker's jobs stranded, finished jobs piling up)."""

from __future__ import annotations

import logging
import threading

import anyio
import anyio.to_thread

from .batching import jittered

log = logging.getLogger("monitor")


class Duty:
    """One duty of the monitor (a subclass says what its pass does and how often)."""

    name = "duty"  # (in log lines and the name of its thread)

    def __init__(self):
        self.errors = 0  # passes that failed (logged)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self):
        """One pass."""
        raise NotImplementedError

    def interval(self) -> float:
        """Seconds from the end of a pass to the next one."""
        raise NotImplementedError

    def start(self):
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"jobs-{self.name.replace(' ', '-')}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _check_logged(self) -> None:
        try:
            self.check()
        except Exception:  # noqa: BLE001 - see the module's docstring
            self.errors += 1
            log.exception("%s pass failed; retrying", self.name)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._check_logged()
            self._stop.wait(jittered(self.interval()))

    async def serve(self) -> None:
        """Run until cancelled (anyio: asyncio or trio)."""
        while True:
            await anyio.to_thread.run_sync(self._check_logged)
            await anyio.sleep(jittered(self.interval()))
