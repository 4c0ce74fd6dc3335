"""The constants of the metrics' base-2 exponentials, in a module of their own.

The eager top-label scan (``_metrics_kernels``), the compiled scan (``_metrics_fused``) and
the soft estimators (``_metrics_soft``) compute e^(z - max) as 2^x with
x = (z - max) log2(e); the compiled scan and the soft estimators floor x at ``EXP2_FLOOR``.
They live here, below all three, so the compiled scan does not import the eager one (which
imports it on first use).
"""

from __future__ import annotations

import math

LOG2_E = 1.0 / math.log(2.0)
# torch's exp takes a much slower path where it underflows; the kernels use exp2 of an
# argument floored at -115 (2^-115 ~ 2e-35, a normal float32 that no sum can notice).
EXP2_FLOOR = -115.0
