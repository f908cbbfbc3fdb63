import pytest
import torch

from . import base, consts


def abs_decomposed(x):
    return torch.where(x < 0, -x, x)


def abs_decomposed_(x):
    return x.copy_(torch.where(x < 0, -x, x))


@pytest.mark.abs
def test_abs():
    bench = base.UnaryPointwiseBenchmark(
        op_name="abs", torch_op=torch.abs, gems_op=abs_decomposed, dtypes=consts.FLOAT_DTYPES
    )
    bench.run()


@pytest.mark.abs_
def test_abs_inplace():
    bench = base.UnaryPointwiseBenchmark(
        op_name="abs_", torch_op=torch.abs_, gems_op=abs_decomposed_, dtypes=consts.FLOAT_DTYPES
    )
    bench.run()
