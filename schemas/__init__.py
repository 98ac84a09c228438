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
