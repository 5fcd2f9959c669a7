"""Field-metadata markers that travel with Spark schemas between operators of different systems."""

WIDE_DECIMAL_KEY = "streamling.type"
"""Field metadata key naming the wide type (``decimal(p,s)``) a column really holds when Spark cannot
(integers past 38 digits: Avro/ClickHouse UInt256 …); sinks read it to create the right column type."""
