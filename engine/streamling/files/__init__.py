"""The `file` source: Parquet, CSV, newline-delimited JSON and Avro files under a path, read whole, one or more
files per epoch, by Spark tasks (`reader.py`), with a last-modified watermark as its position (`positions.py`)."""
