import pytest
import torch

from . import base, consts


def softmax_decomposed(x, dim):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


@pytest.mark.softmax
def test_softmax():
    bench = base.ReductionBenchmark(
        op_name="softmax", torch_op=torch.softmax, gems_op=softmax_decomposed,
        dtypes=consts.FLOAT_DTYPES,
    )
    bench.run()
