"""The live-terminal report: folding shared inputs, colours, and silence on a pipe."""

import io

from zlbench.plugins import report

TABLE = [
    "Operator: mul  Performance Test (dtype=torch.float16, mode=kernel,level=core)",
    "Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail",
    "-" * 94,
    "SUCCESS               0.004640            0.098592               0.047          [torch.Size([64, 64]), 2, 'sum']",
    "SUCCESS               0.021600            0.050256               0.430          [torch.Size([4096, 4096]), 2, 'sum']",
]


def test_split_top_level_respects_brackets_and_quotes():
    assert report.split_top_level("[torch.Size([1, 2]), {'a': (1, 2)}, 'x, y']") == [
        "torch.Size([1, 2])", "{'a': (1, 2)}", "'x, y'"]
    assert report.split_top_level("([1], {})") is None
    assert report.split_top_level("[]") == []


def test_fold_shapes_moves_columns_equal_in_every_row_to_a_legend():
    shapes = ["[torch.Size([64, 64]), 2, 'sum']", "[torch.Size([8]), 2, 'sum']"]
    kept, legend = report.fold_shapes(shapes)
    assert kept == ["[torch.Size([64, 64])]", "[torch.Size([8])]"]
    assert legend == "same in every row: #2=2, #3='sum'"


def test_fold_shapes_leaves_tables_alone_when_nothing_or_everything_is_shared():
    assert report.fold_shapes(["[torch.Size([8])]", "[torch.Size([4])]"])[1] is None
    assert report.fold_shapes(["[1, 2]", "[1, 2]"])[1] is None
    assert report.fold_shapes(["[1, 2]"])[1] is None
    assert report.fold_shapes(["[1, 2]", "[1, 2, 3]"])[1] is None


def test_render_table_folds_and_colours_without_touching_numbers():
    out = report.render_table(TABLE)
    assert out[0] == TABLE[0]
    assert "same in every row: #2=2, #3='sum'" in out[1]
    assert out[4].startswith(report.GREEN + "SUCCESS" + report.RESET)
    assert "0.004640            0.098592               0.047          [torch.Size([64, 64])]" in out[4]
    plain = report.render_table(TABLE, colour=False)
    assert plain[4].endswith("[torch.Size([64, 64])]") and "\033" not in "".join(plain)


def test_marker_and_footer_lines_are_highlighted():
    marker = 'BENCHMARK_DIRECT_NO_CUDAGRAPH phase=capture repeat=1 op=nonzero'
    assert report.style_line(marker) == report.YELLOW + marker + report.RESET
    assert report.style_line("zlbench[graph_timer] timer=graph").startswith(report.CYAN)
    assert report.style_line("plain text") == "plain text"


def test_pretty_stream_buffers_one_table_and_passes_progress_through():
    sink = io.StringIO()
    stream = report.PrettyStream(sink)
    stream.write("benchmark/test_mul.py ")
    stream.flush()
    assert sink.getvalue() == "benchmark/test_mul.py "
    stream.write("\n" + "\n".join(TABLE) + "\n")
    assert "Operator" not in sink.getvalue()  # held until the table ends
    stream.write("\n")
    text = sink.getvalue()
    assert "same in every row" in text and text.endswith("\n\n")
    stream.close_out()


class _Config:
    def __init__(self, capture):
        self.capture = capture

    def getoption(self, name, default=None):
        return self.capture if name == "capture" else default


class _Pipe(io.StringIO):
    def isatty(self):
        return False


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_pretty_only_on_a_live_terminal_with_a_run_dir(monkeypatch):
    monkeypatch.setenv("ZL_RUN_DIR", "/tmp/x")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert report.wants_pretty(_Config("no"), _Tty())
    assert not report.wants_pretty(_Config("no"), _Pipe())
    assert not report.wants_pretty(_Config("fd"), _Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not report.wants_pretty(_Config("no"), _Tty())
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.delenv("ZL_RUN_DIR")
    assert not report.wants_pretty(_Config("no"), _Tty())
