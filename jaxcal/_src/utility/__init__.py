"""Utility calibration (SPEC §6): utility families, the UC estimator, sweeps."""
