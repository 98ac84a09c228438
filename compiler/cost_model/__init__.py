"""Cost models: predict which configs of a workload run faster (see `cost_model.py`)."""

from tunehub.compiler.cost_model import roofline
from tunehub.compiler.cost_model.cost_model import CostModel, informative, normalized_throughput
from tunehub.compiler.cost_model.metric import kendall_tau, top_k_recall
from tunehub.compiler.cost_model.random_model import RandomModel
from tunehub.compiler.cost_model.xgb_model import XGBModel

__all__ = [
    "CostModel",
    "RandomModel",
    "XGBModel",
    "informative",
    "kendall_tau",
    "normalized_throughput",
    "roofline",
    "top_k_recall",
]
