"""Operator registry shared by built-ins and plugins."""

from streamling.plugins.registry import REGISTRY, OperatorRegistry, OperatorType, operator

__all__ = ["REGISTRY", "OperatorRegistry", "OperatorType", "operator"]
