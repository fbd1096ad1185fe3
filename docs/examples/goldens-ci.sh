#!/usr/bin/env bash
# Golden checks of your own model in CI: the recipe of docs/GOLDENS.md.
#
#   goldens-ci.sh record MODEL.onnx NAME=INPUT.npy GOLDENS_DIR   once, after an export
#   goldens-ci.sh check  GOLDENS_DIR                             in every CI run
#
# `record` writes GOLDENS_DIR/fp32 (every value from onnxruntime) and
# GOLDENS_DIR/self-cpu-w8a8, GOLDENS_DIR/self-npu-w8a8 (slmcc's own W8A8
# values, compared bit for bit). Commit the folder beside the model.
# `check` fails (exit 1) on the first value that diverges and names its op.
# Needs: slmcc on PATH (or $SLMCC), and for `record` a Python with the
# pinned onnx, onnxruntime and numpy ($SLMCC_PYTHON, else python3).
set -euo pipefail
SLMCC="${SLMCC:-slmcc}"
case "${1:-}" in
  record)
    model="$2"; input="$3"; dir="$4"
    "$SLMCC" golden record "$model" -o "$dir/fp32" --input "$input"
    "$SLMCC" golden record "$model" -o "$dir/self-cpu-w8a8" --input "$input" \
      --self --backend cpu --quant w8a8
    "$SLMCC" golden record "$model" -o "$dir/self-npu-w8a8" --input "$input" \
      --self --backend npu-sim --quant w8a8
    ;;
  check)
    dir="$2"
    "$SLMCC" golden check "$dir/fp32" --backend reference
    "$SLMCC" golden check "$dir/fp32" --backend cpu
    "$SLMCC" golden check "$dir/self-cpu-w8a8" --backend cpu --quant w8a8
    "$SLMCC" golden check "$dir/self-npu-w8a8" --backend npu-sim --quant w8a8
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
