"""DSPy Signatures: what each LM call of a sqlweave program takes and gives."""

from sqlweave.signatures.generation import GenerateSQL, GenerateSQLWithHints

__all__ = ["GenerateSQL", "GenerateSQLWithHints"]
