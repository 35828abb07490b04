"""DSPy Signatures: what each LM call of a sqlweave program takes and gives."""

from sqlweave.signatures.generation import (
    GenerateSQL,
    GenerateSQLFromExamples,
    GenerateSQLWithHints,
)

__all__ = ["GenerateSQL", "GenerateSQLFromExamples", "GenerateSQLWithHints"]
from sqlweave.signatures.correction import CorrectSQL, ReflectOnError  # noqa: E402
from sqlweave.signatures.extraction import ExtractElements  # noqa: E402
from sqlweave.signatures.linking import LinkSchema  # noqa: E402
from sqlweave.signatures.review import ReviewSQL  # noqa: E402
from sqlweave.signatures.selection import SelectCandidate  # noqa: E402

__all__ += [
    "CorrectSQL",
    "ExtractElements",
    "LinkSchema",
    "ReflectOnError",
    "ReviewSQL",
    "SelectCandidate",
]
from sqlweave.signatures.synthesis import DescribeSQL  # noqa: E402

__all__ += ["DescribeSQL"]
