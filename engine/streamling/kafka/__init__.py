"""Kafka plumbing shared by the Kafka source and sink: client configuration, Avro and positions."""
