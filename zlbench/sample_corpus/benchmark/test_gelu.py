import math

import pytest
import torch
import torch.nn.functional as F

from . import base, consts


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def gelu_tanh_decomposed(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


@pytest.mark.gelu
def test_gelu():
    bench = base.UnaryPointwiseBenchmark(
        op_name="gelu", torch_op=gelu_tanh, gems_op=gelu_tanh_decomposed, dtypes=consts.FLOAT_DTYPES
    )
    bench.run()
