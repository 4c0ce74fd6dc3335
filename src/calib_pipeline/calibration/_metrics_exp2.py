"""The base-2 exponential of the top-label scans, shared by the eager torch kernels
(``_metrics_kernels``) and the compiled loop (``_metrics_fused``) so both scale and floor
alike: a confidence is 1 / sum_k 2^x_k with x_k = (z_k - max_j z_j) log2(e), each x_k
floored at ``EXP2_FLOOR``. Both kernel modules import these numbers from here, so neither
imports the other for them.
"""

from __future__ import annotations

import math

LOG2_E = 1.0 / math.log(2.0)
# torch's exp takes a slow path (~50x) where it underflows; the kernels use exp2 of an
# argument floored at -115 (2^-115 ~ 2e-35, a normal float32 that no sum can notice).
EXP2_FLOOR = -115.0
