# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["AdaptiveShares", "DECISION_TIMEOUT_SECONDS", "DECISIVE_REPEATS",
           "DEFAULT_MAX_CHANGE", "DEFAULT_TOLERANCE", "STEERS_ATTRIBUTE", "ShareSteering",
           "choose_policy", "from_weights", "next_shares"]

from . import compute_curve, settle, shares, start, steering
from .settle import DEFAULT_MAX_CHANGE, DEFAULT_TOLERANCE, next_shares
from .shares import DECISION_TIMEOUT_SECONDS, STEERS_ATTRIBUTE, AdaptiveShares
from .start import choose_policy, from_weights
from .steering import DECISIVE_REPEATS, ShareSteering
