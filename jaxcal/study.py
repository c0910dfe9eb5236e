"""A whole calibration study in one call: models × metrics × bin counts × utilities.

:func:`evaluate` (also ``jaxcal.evaluate``) computes every requested metric of
every model for every bin count and utility, one compiled program per class
count and size bucket, sharded over a ``jax.sharding.Mesh`` of all devices and
working across ``jax.distributed`` processes; :class:`StudyResult` holds the
named arrays and converts to a table, a dict and JSON.
"""

from jaxcal._src.study import DEFAULT_METRICS, METRICS, StudyResult, evaluate, size_bucket

__all__ = ["DEFAULT_METRICS", "METRICS", "StudyResult", "evaluate", "size_bucket"]
