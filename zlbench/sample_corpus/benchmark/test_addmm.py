import pytest
import torch

from . import base, consts


def addmm_decomposed(c, a, b):
    return torch.mm(a, b).add_(c)


def addmm_flops(c, a, b):
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


@pytest.mark.addmm
def test_addmm():
    bench = base.AddmmBenchmark(
        op_name="addmm", torch_op=torch.addmm, gems_op=addmm_decomposed,
        dtypes=consts.FLOAT_DTYPES, flops_fn=addmm_flops,
    )
    bench.run()
