"""A Kafka source's lag, logged every ``kafka_source.lag_report_interval_ms``: the records between its
committed offsets and the partitions' high watermarks. The original exported this as a metric; here the log
line is the report (``api.source_status`` and the Dagster observations give the same figure on demand)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from streamling.core.scope import in_this_run

log = logging.getLogger("streamling.kafka")
WATERMARK_TIMEOUT_SEC = 5.0


class LagReporter:
    """A daemon thread with its own consumer (metadata only: it joins no group and reads no records)."""

    def __init__(
        self,
        label: str,
        topic: str,
        interval_sec: float,
        committed: Callable[[], Mapping[str, int] | None],
        make_consumer: Callable[[], Any],
    ) -> None:
        self.label = label
        self.topic = topic
        self.interval_sec = interval_sec
        self.committed = committed
        self.make_consumer = make_consumer
        self._consumer: Any = None
        self._stop = threading.Event()
        self.on_report: Callable[[dict[int, int]], None] | None = None
        """Told each report's lag per partition (the consumer-lag metric)."""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and self.interval_sec > 0:
            self._thread = threading.Thread(target=in_this_run(self._run), name=f"lag {self.label}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """The thread closes its own consumer on the way out (it may still be waiting on a broker)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(WATERMARK_TIMEOUT_SEC)
            self._thread = None
        else:
            self._close()

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_sec):
                try:
                    self.report()
                except Exception as exc:  # an unreachable broker is reported by the reads; the next tick retries
                    log.debug("%s: lag not reported: %s", self.label, exc)
        finally:
            self._close()

    def report(self) -> dict[int, int] | None:
        """Log and return the lag per partition; None before the source knows its position."""
        from confluent_kafka import TopicPartition

        position = self.committed()
        if position is None:
            return None
        if self._consumer is None:
            self._consumer = self.make_consumer()
        lags: dict[int, int] = {}
        for partition, offset in sorted(position.items(), key=lambda item: int(item[0])):
            if self._stop.is_set() and self._thread is not None:
                return None
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, int(partition)), timeout=WATERMARK_TIMEOUT_SEC, cached=False
            )
            lags[int(partition)] = max(0, high - int(offset))
        if self.on_report is not None:
            self.on_report(lags)
        detail = ", ".join(f"partition {p}: {n}" for p, n in lags.items())
        log.info(
            "%s lag on topic '%s': %d records after the committed offsets (%s)",
            self.label,
            self.topic,
            sum(lags.values()),
            detail,
        )
        return lags
