"""What the ClickHouse source and sink share: clients for a server or the embedded engine, identifiers."""
