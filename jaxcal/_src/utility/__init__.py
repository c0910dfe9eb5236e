"""Utility calibration (Hegazy et al. 2025): utility families, the UC estimator, sweeps."""
