"""The torch-integration tests use small tensors: one intra-op thread runs them faster, and on a
shared, oversubscribed machine it avoids paying a scheduler time slice at every OpenMP barrier."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _single_intra_op_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
