"""compare_triton_caches on synthetic Triton cache dirs (<dir>/<hash>/<name>.<ext>)."""

from __future__ import annotations

from zlbench import tuner_cache as tc


def ttir(block):
    return (f'#loc = loc("/src/mm.py":10:0)\nmodule {{\n  tt.func @mm() {{\n'
            f'    %c = arith.constant {block} : i32 loc(#loc1)\n  }} loc(#loc)\n}} loc(#loc)\n'
            f'#loc1 = loc("/src/mm.py":12:4)\n')


def put(cache, entry, name, block, ptx="mov.u32", cubin=b"\x7fELF1", loc_line=10):
    d = cache / entry
    d.mkdir(parents=True)
    (d / f"{name}.ttir").write_text(ttir(block).replace(":10:0", f":{loc_line}:0"))
    (d / f"{name}.ptx").write_text(f"// block {block}\n{ptx}\n")
    (d / f"{name}.cubin").write_bytes(cubin + bytes([block % 256]))
    (d / f"{name}.json").write_text(f'{{"hash": "{entry}", "name": "{name}"}}')
    (d / f"__grp__{name}.json").write_text("{}")


def test_identical_when_b_compiled_a_subset_byte_for_byte(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for i, block in enumerate((32, 64, 128)):  # A tuned: every candidate
        put(a, f"A{i}", "mm_kernel", block)
    put(b, "B0", "mm_kernel", 64, loc_line=99)  # B replayed the winner; other cache hash
    (b / "cuda_utils").mkdir()
    (b / "cuda_utils" / "cuda_utils.so").write_bytes(b"so")  # not a kernel
    report = tc.compare_triton_caches(a, b)
    assert report.verdict == "identical" and report.identical
    assert report.counts() == {"variants_a": 3, "variants_b": 1, "same": 1, "changed": 0,
                               "unmatched": 0}
    assert "dead" in report.summary()


def test_live_when_the_same_ttir_lowers_differently(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    put(a, "A0", "mm_kernel", 64)
    put(a, "A1", "add_kernel", 8)
    put(b, "B0", "mm_kernel", 64, cubin=b"\x7fELF2")
    put(b, "B1", "add_kernel", 8)
    report = tc.compare_triton_caches(a, b)
    assert report.verdict == "live" and not report.identical
    assert report.kernels["mm_kernel"].changed == 1 and report.kernels["add_kernel"].same == 1
    assert "mm_kernel" in report.summary()
    assert report.to_json()["changed"] == 1


def test_inconclusive_when_b_compiled_kernels_a_never_did(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    put(a, "A0", "mm_kernel", 64)
    put(b, "B0", "mm_kernel", 256)
    assert tc.compare_triton_caches(a, b).verdict == "inconclusive"


def test_empty_side(tmp_path):
    a = tmp_path / "a"
    put(a, "A0", "mm_kernel", 64)
    report = tc.compare_triton_caches(a, tmp_path / "missing")
    assert report.verdict == "empty" and not report.identical
