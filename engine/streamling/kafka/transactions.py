"""The Kafka sink's effectively-once mode (``exactly_once: true``): each epoch is one Kafka transaction.

The epoch's rows come to the driver as Arrow; on the committer thread one transactional producer begins a
transaction, produces them, adds the epoch's progress to the transaction, and commits — so the records and the record
of having written them become visible together, to ``read_committed`` consumers, or not at all.

- The producer's ``transactional.id`` is derived from the application, the sink and its topic: a restarted run's
  `init_transactions` fences its predecessor (a zombie's next commit fails) and aborts the transaction it left open.
- The progress is an offset committed inside the transaction (``send_offsets_to_transaction``) for a consumer
  group of the sink and source (``streamling-sink.<application>.<sink>.<source>``): the offset is the epoch number
  and its metadata the epoch's bounds. After a crash between the Kafka commit and the state backend's commit,
  `applied_epoch` tells the runner, which replays exactly that epoch, and the sink skips it: nothing is doubled.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import zlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import pyarrow as pa
from tenacity import RetryCallState, retry_if_exception_type, wait_none

from streamling.core.faults import crash_point
from streamling.core.retry import RetryPolicy
from streamling.errors import LeaseLostError, StreamlingError
from streamling.kafka.availability import Outage, describe, is_unavailable, wait_out
from streamling.plugin import AppliedEpoch, Epoch

log = logging.getLogger("streamling.kafka")
PROGRESS_PARTITION = 0
TRANSACTION_TIMEOUT_SEC = 60.0
STUCK_TRANSACTION_SEC = 30.0
"""How long one attempt at an epoch's transaction may take before its producer is given up for a new one."""


class _Stuck(Exception):
    """An attempt at a transaction that did not complete within `STUCK_TRANSACTION_SEC`."""


def _pack(epoch: Epoch) -> str:
    """The epoch's bounds as offset metadata, compressed (brokers keep 4 KB of it by default)."""
    text = json.dumps({"start": dict(epoch.start), "end": dict(epoch.end)}, sort_keys=True, separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode())).decode()


def _unpack(metadata: str) -> dict[str, Any]:
    return json.loads(zlib.decompress(base64.b64decode(metadata)))


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return {str(k): v for k, v in a.items()} == {str(k): v for k, v in b.items()}


class EpochTransactions:
    """One sink's transactional producer and its per-source progress."""

    def __init__(self, config: Mapping[str, Any], topic: str, identity: str, label: str, patience: float) -> None:
        # Without the Python `logger`: confluent-kafka calls it from inside `commit_transaction`/`flush`, and when an
        # error is pending there the call fails with "<class 'logging.LogRecord'> returned a result with an
        # exception set" (seen on a broker restart), replacing the real error; librdkafka logs to stderr instead.
        self.config = {k: v for k, v in config.items() if k != "logger"}
        self.topic = topic
        self.identity = identity
        """``<application>.<sink>``: names the transactional id and the progress groups."""
        self.label = label
        self.patience = patience
        self.transactional_id = f"streamling.{identity}.{topic}"
        self._producer: Any = None
        self._groups: dict[str, Any] = {}
        self._applied: dict[str, AppliedEpoch | None] = {}
        self._lock = threading.Lock()

    def open(self) -> None:
        """Create the producer and take the transactional id over (fencing a previous run's producer)."""
        from confluent_kafka import Producer

        self._broker_lost = False
        config = {
            **self.config,
            "error_cb": self._on_error,
            "transactional.id": self.transactional_id,
            # librdkafka wants undelivered messages to time out within the transaction's own timeout.
            "transaction.timeout.ms": max(int(TRANSACTION_TIMEOUT_SEC * 1000), int(self.config["message.timeout.ms"])),
        }
        self._producer = Producer(config)
        wait_out(
            lambda: self._producer.init_transactions(TRANSACTION_TIMEOUT_SEC),
            Outage(self.label, "broker", self.patience),
        )
        log.info("%s writes each epoch in one transaction (transactional.id %s)", self.label, self.transactional_id)

    def _on_error(self, error: Any) -> None:
        """librdkafka's client-level errors: a lost broker connection is remembered (see `write`)."""
        from confluent_kafka import KafkaError

        if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
            self._broker_lost = True

    def group(self, source: str) -> str:
        return f"streamling-sink.{self.identity}.{source}"

    def _consumer(self, source: str) -> Any:
        """A consumer of the source's progress group: it reads the group's offset and gives the transaction the
        group's metadata; it never subscribes."""
        from confluent_kafka import Consumer

        found = self._groups.get(source)
        if found is None:
            settings = {k: v for k, v in self.config.items() if not k.startswith(_PRODUCER_ONLY)}
            found = Consumer({**settings, "group.id": self.group(source), "enable.auto.commit": False})
            self._groups[source] = found
        return found

    def applied_epoch(self, source: str) -> AppliedEpoch | None:
        """The last epoch of `source` whose transaction committed, from the progress group's offset."""
        with self._lock:
            return self._load_applied(source)

    def _load_applied(self, source: str) -> AppliedEpoch | None:
        from confluent_kafka import TopicPartition

        asked = [TopicPartition(self.topic, PROGRESS_PARTITION)]
        committed = wait_out(
            lambda: self._consumer(source).committed(asked, timeout=10), Outage(self.label, "broker", self.patience)
        )
        found = committed[0] if committed else None
        applied = None
        if found is not None and found.offset >= 0 and found.metadata:
            bounds = _unpack(found.metadata)
            applied = AppliedEpoch(int(found.offset), bounds["start"], bounds["end"])
        self._applied[source] = applied
        return applied

    def write(self, epoch: Epoch, produce: Callable[[Any], int], rows: pa.Table | None) -> bool:
        """`produce(producer)` the epoch's records and commit them with its progress in one transaction. False when
        the epoch had already been committed (a replay): nothing is written."""
        from confluent_kafka import KafkaException, TopicPartition

        with self._lock:
            applied = self._applied[epoch.source] if epoch.source in self._applied else self._load_applied(epoch.source)
            if applied is not None and applied.id == epoch.id:
                if _same(applied.start, epoch.start) and _same(applied.end, epoch.end):
                    log.info("%s: epoch %d of %s was committed before; skipped", self.label, epoch.id, epoch.source)
                    return False
            self._producer.poll(0)  # serves the error callback: was the broker lost since the last epoch?
            if self._broker_lost:
                # After the local broker restarts, the first transaction of a producer that knew it before never
                # completes, and stays open for read_committed consumers even once a new producer took the id
                # over (measured); a producer made after the restart has no such trouble.
                log.info("%s: the broker connection was lost; a new producer writes epoch %d", self.label, epoch.id)
                self.open()
            offsets = [TopicPartition(self.topic, PROGRESS_PARTITION, epoch.id, _pack(epoch))]
            metadata = self._consumer(epoch.source).consumer_group_metadata()

            def transaction(producer: Any) -> None:
                producer.begin_transaction()
                produce(producer)
                producer.send_offsets_to_transaction(offsets, metadata, TRANSACTION_TIMEOUT_SEC)
                crash_point("during_write", epoch.id)  # produced, not committed: the successor aborts it
                producer.commit_transaction(TRANSACTION_TIMEOUT_SEC)

            try:
                self._bounded(transaction, epoch)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is not None and error.fatal():
                    # Fenced (another run took the transactional id over) or another fatal error: this producer is
                    # finished; what it produced in the open transaction is aborted by the new owner.
                    raise LeaseLostError(
                        f"{self.label}: its Kafka transaction was fenced: {describe(exc)}", retriable=True
                    ) from None
                self._abort()
                kind = StreamlingError.unavailable if is_unavailable(exc) else StreamlingError.retry
                raise kind(f"{self.label}: the transaction of epoch {epoch.id} failed: {describe(exc)}") from None
            except BaseException:
                self._abort()
                raise
            self._applied[epoch.source] = AppliedEpoch(epoch.id, dict(epoch.start), dict(epoch.end))
            return True

    def _bounded(self, transaction: Callable[[Any], None], epoch: Epoch) -> None:
        """Run `transaction(producer)` with a deadline. A producer whose call outlives it (after a broker restart,
        the local broker left `send_offsets_to_transaction` waiting forever, its own timeout notwithstanding) is
        abandoned: a new producer takes the transactional id over, which fences the old one and aborts its
        transaction, and the epoch is written again — for up to the broker patience."""

        def attempt() -> None:
            producer = self._producer
            outcome: list[BaseException | None] = []

            def run() -> None:
                try:
                    transaction(producer)
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            worker = threading.Thread(target=run, name=f"streamling-txn-{self.label}", daemon=True)
            worker.start()
            worker.join(STUCK_TRANSACTION_SEC)
            if not outcome:
                raise _Stuck
            if outcome[0] is not None:
                raise outcome[0]

        def replace_producer(_state: RetryCallState) -> None:
            log.warning(
                "%s: the transaction of epoch %d did not complete within %.0f s; a new producer takes "
                "transactional.id %s over and writes it again",
                self.label,
                epoch.id,
                STUCK_TRANSACTION_SEC,
                self.transactional_id,
            )
            self.open()

        def give_up(_state: RetryCallState) -> NoReturn:
            raise StreamlingError.retry(
                f"{self.label}: the transaction of epoch {epoch.id} did not complete within {self.patience:.0f} s"
            )

        # No wait between attempts: each one already waited STUCK_TRANSACTION_SEC.
        policy = RetryPolicy(None, self.patience, 0.0, 0.0)  # its stop: no attempt starts after the patience
        policy.retrying(
            retry_if_exception_type(_Stuck), wait=wait_none(), before_sleep=replace_producer, give_up=give_up
        )(attempt)

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(TRANSACTION_TIMEOUT_SEC)
        except Exception as exc:  # the next run's init_transactions aborts it anyway
            log.debug("%s: abort failed: %s", self.label, describe(exc))

    def close(self) -> None:
        for consumer in self._groups.values():
            try:
                consumer.close()
            except Exception:
                pass
        self._groups.clear()
        self._producer = None


_PRODUCER_ONLY = (
    "compression.",
    "enable.idempotence",
    "acks",
    "linger.ms",
    "queue.buffering.",
    "message.timeout.ms",
    "batch.num.messages",
    "message.max.bytes",
    "transactional.id",
    "transaction.timeout.ms",
)
"""Producer settings a consumer does not accept (librdkafka warns about or rejects them)."""
