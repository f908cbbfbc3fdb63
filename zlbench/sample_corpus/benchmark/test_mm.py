import pytest
import torch

from . import base, consts


def mm_via_einsum(a, b):
    return torch.einsum("mk,kn->mn", a, b)


def mm_flops(a, b):
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


@pytest.mark.mm
def test_mm():
    bench = base.BlasBenchmark(
        op_name="mm", torch_op=torch.mm, gems_op=mm_via_einsum, dtypes=consts.FLOAT_DTYPES,
        flops_fn=mm_flops,
    )
    bench.run()
