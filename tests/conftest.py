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
