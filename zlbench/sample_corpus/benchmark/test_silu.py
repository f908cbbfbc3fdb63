import pytest
import torch
import torch.nn.functional as F

from . import base, consts


def silu_decomposed(x):
    return x * torch.sigmoid(x)


@pytest.mark.silu
def test_silu():
    bench = base.UnaryPointwiseBenchmark(
        op_name="silu", torch_op=F.silu, gems_op=silu_decomposed, dtypes=consts.FLOAT_DTYPES
    )
    bench.run()
