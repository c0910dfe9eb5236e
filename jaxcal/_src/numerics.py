"""Numerical conventions shared by every module.

``PRECISION`` is the precision every matrix product in the metrics and
recalibrators requests. On GPUs (and TPUs) XLA's default for a float32
product is TF32 (bf16 passes on TPU), about 1e-3 relative error: enough to
move a kernel-based LCE by 1 % and to break agreement with float64
references. ``tests/test_precision.py`` checks the source for it.
"""

import jax

__all__ = ["PRECISION"]

#: Full float32 products on every backend (no TF32 on GPU, no bf16 passes on TPU).
PRECISION = jax.lax.Precision.HIGHEST
