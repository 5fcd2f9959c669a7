"""``python -m streamling_dagster.execute -j <job>``: `dagster job execute` for scripts and cron, with exit codes
that tell a refusal from a failure, and a wait for the running run.

`dagster job execute` exits 1 whether a run failed or was refused because another run of its pipeline holds it,
and has no way to wait for that run. This runs the job the same way (in this process, on the instance of
``$DAGSTER_HOME``, the definitions `streamling_dagster` loads) and says how it ended:

- 0: the run succeeded;
- 1: the run failed (the engine, a sink, a bad file: a real failure);
- 3: refused — another run of the pipeline was running or queued (with ``--wait SEC``, still after that long); no
  run is created (nothing shows failed), or, when one started in between, the run is tagged
  ``streamling/refused``; nothing ran, so trying again later is safe;
- 4: the run was stopped on request (a SIGTERM/SIGINT, or *Terminate*) and ended Canceled, positions committed;
- 2: bad arguments (no such job, a config file that is not YAML).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from dagster._core.definitions.reconstruct import ReconstructableRepository

from streamling_dagster.guard import (
    PIPELINE_TAG,
    QUEUED,
    REFUSED_TAG,
    RUNNING,
    describe,
    other_runs,
    refusal,
    wait_while_held,
)

SUCCESS, FAILED, BAD_ARGUMENTS, REFUSED, STOPPED = 0, 1, 2, 3, 4


def run_config(job: dg.JobDefinition, config: dict[str, Any], wait: float | None) -> dict[str, Any]:
    """The run config, with `wait_for_running_sec` set on each Streamling op when `wait` is given."""
    if wait is None:
        return config
    ops = dict(config.get("ops") or {})
    for name, node in job.graph.node_dict.items():
        schema = node.definition.config_schema
        if "wait_for_running_sec" in getattr(schema.config_type if schema else None, "fields", {}):
            op = dict(ops.get(name) or {})
            op["config"] = {**(op.get("config") or {}), "wait_for_running_sec": wait}
            ops[name] = op
    return {**config, "ops": ops}


def holder(instance: dg.DagsterInstance, job: dg.JobDefinition, wait: float) -> dg.DagsterRun | None:
    """The run that holds one of the job's pipelines, still after `wait` seconds; None once all are free. Asked
    before the run is created, so a refusal leaves no failed run behind (the op checks again: a run may start in
    between)."""
    pipelines = sorted({n.definition.tags.get(PIPELINE_TAG) for n in job.graph.node_dict.values()} - {None})

    def find() -> dg.DagsterRun | None:
        found = [r.dagster_run for p in pipelines for r in other_runs(instance, p, (*RUNNING, *QUEUED))]
        return found[0] if found else None

    return wait_while_held(
        find, wait, lambda run: print(f"waiting up to {wait:.0f} s for {describe(run)} to end", file=sys.stderr)
    )


def outcome(run: dg.DagsterRun | None) -> tuple[int, str]:
    if run is None:
        return FAILED, "the run is not in the instance"
    if run.status == dg.DagsterRunStatus.SUCCESS:
        return SUCCESS, f"run {run.run_id} succeeded"
    if REFUSED_TAG in run.tags:
        return REFUSED, f"run {run.run_id} was refused: another run ({run.tags[REFUSED_TAG]}) holds the pipeline"
    if run.status == dg.DagsterRunStatus.CANCELED:
        return STOPPED, f"run {run.run_id} was stopped on request and ended Canceled"
    return FAILED, f"run {run.run_id} ended {run.status.value}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamling_dagster.execute",
        description="Run a Streamling job in this process; exit 0 succeeded, 1 failed, 3 refused, 4 stopped.",
    )
    parser.add_argument("-j", "--job", required=True, help="e.g. orders_hybrid__backfill")
    parser.add_argument("-c", "--config", type=Path, help="a run config file (YAML)")
    parser.add_argument(
        "--wait", type=float, metavar="SEC", help="wait up to SEC for a running run of the pipeline to end"
    )
    args = parser.parse_args(argv)
    try:
        config = yaml.safe_load(args.config.read_text()) if args.config else {}
    except (OSError, yaml.YAMLError) as exc:
        print(f"Error: --config {args.config}: {exc}", file=sys.stderr)
        return BAD_ARGUMENTS
    repository = ReconstructableRepository.for_module("streamling_dagster", "defs", os.getcwd())
    definitions = repository.get_definition()
    if not definitions.has_job(args.job):
        print(f"Error: -j: no job '{args.job}' (jobs: {', '.join(sorted(definitions.job_names))})", file=sys.stderr)
        return BAD_ARGUMENTS
    job = definitions.get_job(args.job)
    with dg.DagsterInstance.get() as instance:
        busy = holder(instance, job, args.wait or 0.0)
        if busy is not None:
            pipeline = busy.tags.get(PIPELINE_TAG, "?")
            waited = f" (waited {args.wait:.0f} s for it)" if args.wait else ""
            print(f"Error: {refusal(pipeline, busy, args.job)}{waited}", file=sys.stderr)
            print(f"refused: no run was created; {describe(busy)} holds the pipeline", file=sys.stderr)
            return REFUSED
        result = dg.execute_job(
            repository.get_reconstructable_job(args.job),
            instance=instance,
            run_config=run_config(job, config or {}, args.wait),
            raise_on_error=False,
        )
        code, said = outcome(instance.get_run_by_id(result.run_id))
    print(said, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
