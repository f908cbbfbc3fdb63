"""pytest plugin that lets ``pytest --collect-only`` import flag_gems on a CPU machine.

Recent FlagGems resolves a Triton benchmarker while importing (its libtuner
decorators ask ``triton.runtime.driver.active``), and Triton raises "0 active
drivers" where there is no GPU, so collection dies in the conftest. Collection runs
no kernel: this gives Triton a placeholder driver that refuses every real use.
It is loaded only into the collect-only subprocess of ``zlbench ops scan``; a real
driver, when one is active, is left alone.
"""

import os

SHIM_ENV = "ZL_COLLECT_DRIVER_SHIM"


class CollectOnlyDriver:
    """Answers just enough for import-time queries; everything else raises."""

    def get_current_target(self):
        raise RuntimeError("collect-only placeholder driver: no device target")

    def get_benchmarker(self):
        def refuse(*args, **kwargs):
            raise RuntimeError("collect-only placeholder driver: nothing can be timed")

        return refuse

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def __getattr__(self, name):
        raise AttributeError(f"collect-only placeholder driver has no {name}")


def _install():
    try:
        from triton.runtime.driver import driver
    except Exception:
        return  # no triton: flag_gems cannot import; the scan reports it unverified
    try:
        _ = driver.active  # a real GPU driver: leave it alone
        return
    except RuntimeError:
        pass
    driver.set_active(CollectOnlyDriver())
    os.environ[SHIM_ENV] = "1"


_install()
