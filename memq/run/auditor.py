"""Running the auditor: in the foreground (``memq audit serve``) or in a thread (tests).

The composition root of :class:`memq.audit.service.Auditor`: it gives it its lag source
(:class:`memq.consumer.groups.LagCollector`, from the ``lag`` configuration section; the
auditor, a role like the consumer, cannot import it), announces readiness
(:mod:`memq.run.ready`) and stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from memq.audit.config import AuditorConfig
from memq.audit.service import Auditor
from memq.run.ready import announce_ready

__all__ = ["READY_MARKER", "AuditorThread", "build_auditor", "run_auditor"]

#: Printed (with a JSON object) once the auditor serves; the dev stack waits for it.
READY_MARKER = "memq auditor ready"


def build_auditor(config: AuditorConfig) -> Auditor:
    """The auditor, measuring consumer lag when ``lag.bootstrap_servers`` is set."""
    lag = None
    if config.lag.bootstrap_servers:
        from memq.consumer.groups import GroupAdmin, LagCollector

        admin = GroupAdmin(
            config.lag.bootstrap_servers,
            dict(config.lag.client),
            timeout=config.lag.timeout_s,
            kafka=dict(config.lag.kafka),
        )
        lag = LagCollector(admin, config.lag.groups)
    return Auditor(config, lag=lag)


def run_auditor(config: AuditorConfig, ready_file: Path | None = None) -> None:
    """Serve until SIGTERM/SIGINT."""

    async def main() -> None:
        auditor = build_auditor(config)
        try:
            await auditor.start()
        except BaseException:
            await auditor.shutdown()
            raise
        info: dict[str, object] = {"url": auditor.url, "port": auditor.port}
        announce_ready(READY_MARKER, info, ready_file)
        await auditor.serve_until_signal()

    asyncio.run(main())


class AuditorThread:
    """An auditor on its own event loop in a daemon thread (tests, embedding)."""

    def __init__(self, config: AuditorConfig) -> None:
        self.config = config
        self.auditor: Auditor | None = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self, timeout: float = 30.0) -> Auditor:
        self._thread.start()
        self.auditor = build_auditor(self.config)
        asyncio.run_coroutine_threadsafe(self.auditor.start(), self.loop).result(timeout)
        return self.auditor

    @property
    def url(self) -> str:
        assert self.auditor is not None
        return self.auditor.url

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the auditor down and stop its loop (again: nothing to do)."""
        if not self._thread.is_alive():
            return
        if self.auditor is not None:
            asyncio.run_coroutine_threadsafe(self.auditor.shutdown(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
