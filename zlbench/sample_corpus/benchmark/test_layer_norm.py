import pytest
import torch
import torch.nn.functional as F

from . import base, consts


def layer_norm_decomposed(x, shape, weight, bias, eps):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


@pytest.mark.layer_norm
def test_layer_norm():
    bench = base.NormBenchmark(
        op_name="layer_norm", torch_op=F.layer_norm, gems_op=layer_norm_decomposed,
        dtypes=consts.FLOAT_DTYPES,
    )
    bench.run()
