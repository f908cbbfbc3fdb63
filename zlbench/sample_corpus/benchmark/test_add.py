import pytest
import torch

from . import base, consts


def add_via_sub(a, b):
    return torch.sub(a, b.neg())


def bytes_moved(a, b):
    return 3 * a.numel() * a.element_size()


@pytest.mark.add
def test_add():
    bench = base.BinaryPointwiseBenchmark(
        op_name="add", torch_op=torch.add, gems_op=add_via_sub, dtypes=consts.FLOAT_DTYPES,
        gbps_fn=bytes_moved,
    )
    bench.run()
