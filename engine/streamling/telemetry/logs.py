"""Logging setup: engine logs go to stderr (stdout belongs to the print sink), as text or JSON lines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger = logging.getLogger("streamling")
    logger.handlers[:] = [handler]
    logger.setLevel(LEVELS.get(level, logging.INFO))
    logger.propagate = False
    # py4j logs every callback at INFO; keep it to warnings.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # The connection pools' own reports (a failed connect, a rolled-back return); the retries that follow log the
    # reason under streamling.postgres, and only past their limit does the run fail.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def configure_worker_logging(level: str = "info", fmt: str = "text") -> None:
    """The same stderr logging in a Spark Python worker (where no CLI set it up), once per process; elsewhere
    (the driver, a test calling a reader directly) logging stays as its owner configured it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    in_worker = getattr(spec, "name", "").startswith("pyspark.")
    if in_worker and not logging.getLogger("streamling").handlers:
        configure_logging(level, fmt)
