"""The wire format of tunehub: task signatures, targets and tuning records.

This package imports nothing else from tunehub, so clients can depend on it alone.
"""

from tunehub.schemas.record import RecordStatus, TuningStatus
from tunehub.schemas.signature import (
    ComputeDecl,
    ReduceDecl,
    SymbolDecl,
    TaskSignature,
    TensorDecl,
)
from tunehub.schemas.target import Target

# This folder is `tunehub.schemas` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.schemas":
    raise ImportError(f"import it as tunehub.schemas, not {__name__}")

__all__ = [
    "ComputeDecl",
    "RecordStatus",
    "ReduceDecl",
    "SymbolDecl",
    "Target",
    "TaskSignature",
    "TensorDecl",
    "TuningStatus",
]
