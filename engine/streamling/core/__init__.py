"""The neutral core: markers, identifiers and retry policy shared across systems; imports nothing heavy."""
