"""``streamling PIPELINE_FILE [--validate | --dry-run] [--config NAME_OR_PATH]``; ``streamling inspect [--node N]
[URL]`` follows a running pipeline's live rows (`streamling.telemetry.follow`); ``streamling serve`` keeps an
engine warm and ``streamling submit PIPELINE_FILE`` runs a pipeline on it (`streamling.serve`); ``streamling
package`` packs the executors' Python environment for a cluster (`streamling.spark.packed_env`).

Exit codes: 0 success (and, with --validate, a valid pipeline); 1 a failure while running; 2 an
invalid pipeline or configuration. User errors print one message without a traceback.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import sys
import traceback

from streamling import __version__
from streamling.config import Settings, load_settings
from streamling.errors import StreamlingError, first_line
from streamling.telemetry.logs import configure_logging
from streamling.topology.pipeline import ValidationReport

log = logging.getLogger("streamling.cli")
EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="streamling",
        description="Run a Streamling pipeline (sources → transforms → sinks) on Apache Spark.",
        epilog="Settings: embedded defaults < config file < STREAMLING__<KEY>[__<NESTED>] variables. "
        "`streamling inspect [--node N] [URL]` follows a running pipeline's live rows; `streamling serve` keeps an "
        "engine warm and `streamling submit PIPELINE` runs a pipeline on it; `streamling package` packs the Python "
        "environment a cluster's executors run.",
    )
    p.add_argument("pipeline", nargs="?", help="pipeline YAML/JSON (default: STREAMLING__PIPELINE_DEFINITION_LOCATION)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--validate", action="store_true", help="validate fully, print a JSON report, move no data")
    mode.add_argument("--dry-run", action="store_true", help="validate like --validate, without the JSON report")
    p.add_argument(
        "--config", metavar="NAME_OR_PATH", help="config file (default base name 'config'; .yaml/.yml/.json)"
    )
    p.add_argument(
        "--reset-positions",
        action="store_true",
        help="start every source over before the run: ClickHouse and a hybrid's backfill from start_at, Kafka "
        "from starting_offsets (a hybrid's stream keeps its offsets); without it a run resumes from its committed "
        "positions whatever the YAML's starting point says",
    )
    p.add_argument("--version", action="version", version=f"streamling {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how a run that will not stop is diagnosed.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if argv[:1] == ["inspect"]:
        from streamling.telemetry.follow import main as inspect

        return inspect(argv[1:])
    if argv[:1] == ["serve"]:
        from streamling.serve.server import main as serve

        return serve(argv[1:])
    if argv[:1] == ["package"]:
        from streamling.spark.packed_env import main as package

        return package(argv[1:])
    if argv[:1] == ["submit"]:
        from streamling.engine_client import main as submit

        return submit(argv[1:])
    args = parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
    except StreamlingError as exc:
        if args.validate:
            print(ValidationReport(errors=[exc.message]).to_json())
        else:
            print(f"Error: {exc.message}", file=sys.stderr)
        return EXIT_INVALID
    configure_logging(settings.log_level, settings.log_format)
    if args.validate or args.dry_run:
        return _validate(args, settings)
    return _run(args, settings)


def _validate(args: argparse.Namespace, settings: Settings) -> int:
    from streamling.api import plan_pipeline, resolve_location

    success = True
    try:
        report = plan_pipeline(resolve_location(args.pipeline, settings), settings)[1]
    except StreamlingError as exc:
        success = exc.user_facing and not exc.retriable  # an outage leaves the question open: exit 1
        report = ValidationReport(errors=[exc.message])
    except Exception as exc:  # an engine bug, reported as such
        log.debug("validation failed internally", exc_info=True)
        success = False
        report = ValidationReport(errors=[f"internal error: {first_line(exc)}"])
    if args.validate:
        print(report.to_json(success=success))
    else:
        for error in report.errors:
            print(f"Error: {error}", file=sys.stderr)
    if not success:
        return EXIT_FAILED
    return EXIT_OK if report.is_valid else EXIT_INVALID


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from streamling.config.layers import resolve_location
    from streamling.spark.session import start_session

    spark = None
    try:
        try:
            location = resolve_location(args.pipeline, settings)
            if args.reset_positions:
                from streamling.api import reset_positions

                reset_positions(location, settings, streams=True)
            starting = start_session(settings.spark)
            # The rest of the engine is imported, the pipeline checked and its sources' schemas looked up while
            # the JVM starts; an invalid structure exits without waiting for it.
            from streamling.api import execute_plan, prepare_pipeline

            try:
                plan = prepare_pipeline(location, settings, starting)
            finally:
                if starting.done() and starting.exception() is None:
                    spark = starting.result()
        except StreamlingError as exc:
            # Bad input is an invalid pipeline or configuration; an outage (a retriable error, such as a
            # Schema Registry that stayed unreachable) is a failed run that may succeed when retried.
            print(f"Error: {exc.message}", file=sys.stderr)
            _debug_traceback(exc, settings)
            return EXIT_INVALID if exc.user_facing and not exc.retriable else EXIT_FAILED
        summary = execute_plan(plan, settings, spark)
    except StreamlingError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        _debug_traceback(exc, settings)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # an engine bug: still one line; the traceback only at debug level
        print(f"Error: internal error: {first_line(exc)}", file=sys.stderr)
        _debug_traceback(exc, settings)
        return EXIT_FAILED
    finally:
        if spark is not None:
            spark.stop()
    summary.log_to(log)
    return EXIT_OK


def _debug_traceback(exc: BaseException, settings: Settings) -> None:
    if settings.log_level == "debug" and not getattr(exc, "user_facing", False):
        traceback.print_exception(exc)


if __name__ == "__main__":
    sys.exit(main())
