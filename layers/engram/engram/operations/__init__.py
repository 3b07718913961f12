"""The operation registry: every operation declared once; REST, MCP and docs are generated from it."""

from engram.operations.registry import REGISTRY, Operation, OpInput, find, select

__all__ = ["REGISTRY", "OpInput", "Operation", "find", "select"]
