import pytest
import torch

from . import base, consts


def sum_via_mean(x, dim):
    return x.mean(dim) * x.shape[dim]


def bytes_read(x):
    return x.numel() * x.element_size()


@pytest.mark.sum
def test_sum():
    bench = base.ReductionBenchmark(
        op_name="sum", torch_op=torch.sum, gems_op=sum_via_mean, dtypes=consts.FLOAT_DTYPES,
        gbps_fn=bytes_read,
    )
    bench.run()
