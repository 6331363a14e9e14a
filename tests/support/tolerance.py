"""How far two correct computations of the same training may differ, worked out from it.

Two correct runs of one training differ only by rounding: another CPU runs other kernels
(oneDNN or Eigen, AVX-512 or AVX2, with or without fused multiply-adds), and replicas,
micro-batches and all-reduces sum a gradient in another order. The bound here follows
that computation instead of one machine's observed noise:

- A sum of `n` floating-point terms, computed in any order, is within `lambda *
  sqrt(n) * u` of the exact sum, relative to the sum of the terms' magnitudes, with
  probability at least `1 - 2 exp(-lambda**2 / 2)` when rounding errors are independent
  and of mean zero (Higham and Mary, "A New Approach to Probabilistic Rounding Error
  Analysis", SIAM J. Sci. Comput. 41(5), 2019); `u` is the unit roundoff, 2**-11 for
  float16, 2**-24 for float32 and 2**-53 for float64. `lambda = 5` makes that
  1 - 7.5e-6 per sum. The worst case, `n * u`, is reached only by errors that all round
  one way, and would let a 1% learning-rate error pass in a long run.
- A weight's gradient is a chain of such sums: over the widths its activations and
  back-propagated errors pass through, and over the batch. `terms` is their total
  length.
- An update carries that error into the weights (SGD scales it by the learning rate;
  Adam divides by a running norm of the same gradients, which at most doubles a
  relative error), and every later step adds its own, independent of the earlier
  ones: over `steps` steps the errors add up as `sqrt(steps * terms)` terms do, twice
  over for the error fed back through the model.

The bound is for `support.compare.relative_difference` (the largest difference over
the largest weight, so a weight near zero does not make rounding look large) and for
values computed from such weights, such as losses. `rejects` checks that a bound still
sees a real bug: a 1% learning-rate error, or one step missing.
"""

import math

__all__ = ["UNIT_ROUNDOFF", "CONFIDENCE", "training", "rejects"]

UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "float32": 2.0 ** -24, "float64": 2.0 ** -53}

CONFIDENCE = 5.0  # lambda above

# How much an optimizer can enlarge a gradient's relative error in its update.
_OPTIMIZER_GAIN = {"sgd": 1.0, "momentum": 1.0, "adam": 2.0}


def training(steps, terms, *, optimizer="sgd", dtype="float32"):
    """The largest relative difference two correct runs of `steps` steps may show.

    Example:

    ```python
    >>> round(training(8, 100, optimizer="adam") / UNIT_ROUNDOFF["float32"])
    566
    ```

    Args:
        steps: training steps taken (a forward pass alone counts as 1).
        terms: the length of the sums behind one gradient: the widths its
            activations pass through forward and back, plus the batch rows summed.
        optimizer: `"sgd"`, `"momentum"` or `"adam"` (AdamW too).
        dtype: the weights' and the computation's float type.
    """
    return (2 * _OPTIMIZER_GAIN[optimizer] * CONFIDENCE * math.sqrt(steps * terms)
            * UNIT_ROUNDOFF[dtype])


def rejects(bound, reference, wrong, relative_difference):
    """Whether every run in `wrong` is farther than `bound` from `reference`.

    Args:
        bound: the tolerance a test uses.
        reference: the correct run's weights.
        wrong: a dict of name to the weights of a deliberately wrong run.
        relative_difference: the measure the test uses.

    Returns:
        The names of the wrong runs the bound would let pass (empty when it rejects all).
    """
    return [name for name, weights in wrong.items()
            if not relative_difference(weights, reference) > bound]
