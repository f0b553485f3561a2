#!/usr/bin/env bash
# Regenerates every figure in plots/ through the public CLI (run from the repository root with
# clustersim installed: see README.md). Nothing here is drawn by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
clustersim sweep scenarios/llama3-70b-1024xh100.yaml --over cluster.chips=64..4096x2 \
    --plot plots/scaling-llama3-70b-h100.png > /dev/null
clustersim sweep scenarios/default.yaml --over software.framework=megatron-te,torch-compile,pytorch-eager \
    --plot plots/breakdown-llama3-8b-frameworks.png > /dev/null
clustersim plan --model llama3-70b --tokens 15T --days 90 --topology dgx-h100,tpu-v5p \
    --plot plots/plan-llama3-70b-15T-90d.png > /dev/null
clustersim validate --suite compute --plot plots/validate-compute.png > /dev/null
clustersim validate --suite training --plot plots/validate-training.png > /dev/null
echo "plots/ regenerated"
