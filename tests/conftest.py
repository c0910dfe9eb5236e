"""Shared fixtures. Real data lives in ../shared (beside the checkout)."""

import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("JAXCAL_SHARED", ROOT.parent / "shared"))
CIFAR = SHARED / "data" / "cifar_logits"


@pytest.fixture(scope="session")
def cifar_dir():
  if not CIFAR.is_dir():
    pytest.skip(f"real CIFAR logits not found at {CIFAR}")
  return CIFAR


def load_cifar(setting: str, split: str = "test"):
  """(logits float32, labels int64) of one CIFAR setting, or skip."""
  d = CIFAR / setting
  if not d.is_dir():
    pytest.skip(f"real CIFAR logits not found at {d}")
  return np.load(d / f"{split}_logits.npy"), np.load(d / f"{split}_labels.npy")


def softmax64(z):
  z = np.asarray(z, np.float64)
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def pytest_collection_modifyitems(config, items):
  """Under CI (CI=true) skip tests marked slow; each has a fast twin."""
  if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    return
  skip = pytest.mark.skip(reason="slow: skipped under CI=true (a faster test covers it)")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)
