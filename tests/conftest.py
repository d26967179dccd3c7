import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/toys.py


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny tensors: thread hand-offs cost more than they save on a shared 2-core box."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True, scope="session")
def _output_root(tmp_path_factory):
    """Every default output of a test lands in a scratch output root, never in the checkout's outputs/."""
    old = os.environ.get("RHEO_OUT")
    os.environ["RHEO_OUT"] = str(tmp_path_factory.mktemp("outputs"))
    yield
    if old is None:
        os.environ.pop("RHEO_OUT", None)
    else:
        os.environ["RHEO_OUT"] = old
