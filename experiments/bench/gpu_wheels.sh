#!/usr/bin/env bash
# Wheels of the pure-Python packages jaxcal's tests need that the lent GPU
# machine's image lacks, fetched HERE (where pip reaches an index) into .whl/
# at the repository root, for gpu_checks.sh's `suite` step to install there.
#
# The image (see /work/.library/device/KINDS.md) has jax, optax, flax, chex,
# scipy, scikit-learn, matplotlib, msgpack and pytest(-xdist), but not jaxopt
# (imported by jaxcal.recalibrate: without it every test that fits a
# recalibrator fails at import) nor the peer packages the agreement tests
# compare with (those skip without them). On 2026-11-29 this was done by hand
# and the H200 ran 1,192 tests with them.
#
# Usage, from the repository root, once per checkout:
#   bash experiments/bench/gpu_wheels.sh
# then name .whl in the device call's `carry` (it is ignored by git through
# .git/info/exclude, which this script extends).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
# pure-Python wheels (py3-none-any), and the two small packages relplot and
# uncertainty-calibration need beyond the image
for spec in jaxopt==0.8.5 relplot==1.0.3 betacal==1.1.0 deprecation==2.1.0 parameterized==0.9.0; do
  "$PY" -m pip download -q --no-deps -d .whl "$spec"
done
# uncertainty-calibration is published as a source archive only: build its wheel here
"$PY" -m pip download -q --no-deps --no-binary=:all: -d .whl uncertainty-calibration==0.1.4
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl .whl/uncertainty-calibration-0.1.4.tar.gz
rm -f .whl/uncertainty-calibration-0.1.4.tar.gz
ls .whl
