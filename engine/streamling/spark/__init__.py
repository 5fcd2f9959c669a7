"""The Spark machinery: starting the driver JVM and its session, the executors' Python and its environment.

Everything here knows Spark's and the JVM's internals (launcher options, class-data archives, the worker daemon,
py4j reflection, packed environments, executor placement); nothing here knows pipelines or epochs, which are
`streamling.runtime`'s.
"""
