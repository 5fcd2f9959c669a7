"""Everything about Kafka: the source (`source/`: spec, offsets, executor reader, decoding, driver operator), the
sink, Avro and the Schema Registry, clients, availability and lag."""
