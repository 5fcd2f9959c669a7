"""A warm engine: `streamling serve` runs the pipelines `streamling submit` (or Dagster) sends it."""
