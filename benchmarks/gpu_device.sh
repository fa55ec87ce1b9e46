#!/usr/bin/env bash
# The GPU checks of the lp and pwl suites in one command, sized for a 10-minute run on a
# lent GPU machine (from the repository root, with results going to $OUT):
#
#   bash benchmarks/gpu_device.sh "$OUT" [SHA]
#
# 1. benchmarks.gpu_pallas: the block-ELL SpMM compiled for real (Mosaic GPU and Triton)
#    against the reference and XLA, and solve_lp_batch's matrix products (at most 150 s);
# 2. benchmarks.gpu_pwl: the branch-and-bound on the GPU against HiGHS on the host's
#    cores, mid and large PWL instances in turn, in the time left before 570 s
#    (GPU_DEVICE_SECONDS), 120 s of it kept for its start, last instance and HiGHS's last
#    solves.
#
# HiGHS needs highspy, which a GPU image may lack: wheels in .whl/ (ignored by .gitignore,
# carried to the machine) are installed first. Fill it here with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 -d .whl highspy==1.16.0
# (the Python version of the GPU machine's image).
set -u
out=${1:?usage: gpu_device.sh OUT_DIR [SHA]}
sha=${2:-}
deadline=${GPU_DEVICE_SECONDS:-570}  # the whole script, inside a 600 s command
mkdir -p "$out"
export PYTHONPATH=.
if compgen -G ".whl/*.whl" > /dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl; then
    export PYTHONPATH=/tmp/site:.
  else
    echo "wheels in .whl/ did not install; going on without them" | tee -a "$out/devices.log"
  fi
fi
export PYTHONUNBUFFERED=1
timeout 60 python3 -c "import jax; print(jax.__version__, jax.devices())" 2>&1 \
  | tee -a "$out/devices.log"
timeout 150 python3 -m benchmarks.gpu_pallas --out "$out" --repeats 10 > "$out/gpu_pallas.log" 2>&1
echo "gpu_pallas exit $? at ${SECONDS} s" | tee -a "$out/devices.log"
left=$((deadline - SECONDS))
# the GPU part's budget leaves time for gpu_pwl's start (python, jax, the GPU backend),
# its last instance (warm-up, compilation, 20 s) and HiGHS's last results
budget=$((left - 120))
if [ "$budget" -gt 30 ]; then
  timeout "$left" python3 -m benchmarks.gpu_pwl --out "$out" --budget "$budget" \
    ${sha:+--sha "$sha"} > "$out/gpu_pwl.log" 2>&1
  echo "gpu_pwl exit $? at ${SECONDS} s" | tee -a "$out/devices.log"
  tail -n 25 "$out/gpu_pwl.log"
else
  echo "no time left for gpu_pwl (${left} s)" | tee -a "$out/devices.log"
fi
