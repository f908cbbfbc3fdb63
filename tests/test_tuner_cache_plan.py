"""ZL_ISOLATE_TUNER_CACHE: the env a run gets and what is left after it."""

from __future__ import annotations

from pathlib import Path

from zlbench import tuner_cache as tc


def test_shared_cache_names_the_flaggems_db_location(tmp_path):
    plan = tc.plan_tuner_cache(tmp_path / "run", False, {"HOME": "/home/u"})
    assert plan.env == {} and plan.description == "shared:/home/u/.flaggems"
    plan.cleanup()  # nothing to drop
    env = {"FLAGGEMS_CACHE_DIR": "/data/fg", "FLAGGEMS_DB_URL": "sqlite:////x/t.db"}
    assert tc.plan_tuner_cache(tmp_path, False, env).description == "shared:sqlite:////x/t.db"
    assert tc.plan_tuner_cache(tmp_path, False, {"FLAGGEMS_CACHE_DIR": "/data/fg"}).description \
        == "shared:/data/fg"


def test_isolated_caches_are_fresh_and_dropped(tmp_path):
    plan = tc.plan_tuner_cache(tmp_path / "20260101-000000_mm", True, {}, temp_root=tmp_path)
    assert plan.description == tc.ISOLATED
    fg, tr = Path(plan.env["FLAGGEMS_CACHE_DIR"]), Path(plan.env["TRITON_CACHE_DIR"])
    assert fg.is_dir() and tr.is_dir() and not any(fg.iterdir())
    assert "FLAGGEMS_DB_URL" not in plan.env
    other = tc.plan_tuner_cache(tmp_path / "20260101-000000_mm", True, {}, temp_root=tmp_path)
    assert other.env["TRITON_CACHE_DIR"] != plan.env["TRITON_CACHE_DIR"]
    plan.cleanup()
    assert not fg.exists() and not tr.exists() and not plan.root.exists()
    other.cleanup()


def test_isolation_redirects_an_inherited_db_url(tmp_path):
    plan = tc.plan_tuner_cache(tmp_path, True, {"FLAGGEMS_DB_URL": "sqlite:////shared.db"},
                               temp_root=tmp_path)
    assert plan.env["FLAGGEMS_DB_URL"].startswith("sqlite:///" + plan.env["FLAGGEMS_CACHE_DIR"])
    plan.cleanup()


def test_kept_triton_cache_survives_cleanup_until_discarded(tmp_path):
    plan = tc.plan_tuner_cache(tmp_path / "a", True, {}, keep_triton_cache=True, temp_root=tmp_path)
    (plan.triton_cache_dir / "x").mkdir()
    plan.cleanup()
    assert plan.triton_cache_dir.is_dir() and not plan.flaggems_cache_dir.exists()
    tc.discard_kept_triton_cache(plan.triton_cache_dir)
    assert not plan.root.exists()
    # A shared cache (not under an isolated root) is never removed.
    shared = tmp_path / "shared" / "triton"
    shared.mkdir(parents=True)
    tc.discard_kept_triton_cache(shared)
    assert shared.is_dir()


def test_the_cache_dirs_follow_tritons_and_flaggems_own_variables():
    from zlbench.tuner_cache import cache_dirs, shared_cache_path, triton_cache_dir

    assert triton_cache_dir({"HOME": "/h"}) == "/h/.triton/cache"
    assert triton_cache_dir({"HOME": "/h", "TRITON_HOME": "/t"}) == "/t/.triton/cache"
    assert triton_cache_dir({"HOME": "/h", "TRITON_HOME": "/t", "TRITON_CACHE_DIR": "/c"}) == "/c"
    assert cache_dirs({"HOME": "/h", "FLAGGEMS_CACHE_DIR": "/f"}) == ["/h/.triton/cache", "/f"]
    assert shared_cache_path({"HOME": "/h"}) == "/h/.flaggems"
    assert shared_cache_path({"HOME": "/h", "FLAGGEMS_DB_URL": "sqlite:///x"}) == "sqlite:///x"
