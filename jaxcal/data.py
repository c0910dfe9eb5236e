"""Loading predictions and data sets, and synthetic data with known truth."""

__all__: list[str] = []
