"""`python -m benchmarks`: the async bench on the tiny debug recipe (one arm of three steps in CI, two arms
marked slow), speed-ups and the target from given numbers, scale from given numbers, and the report;
every figure is checked against the measurements it rests on."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks.harness import asynchrony, command, scale
from benchmarks.harness.command import main
from benchmarks.harness.report import ReportHeader, write_report
from benchmarks.harness.tiny import TINY_RECIPE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = TINY_RECIPE
INPUTS = {
    "faiss_qps": 100.0,
    "cpu_search_flops": 8.0e9,
    "cpu_cores": 2,
    "buffer_put_mbs": 50.0,
    "buffer_get_mbs": 400.0,
    "buffer_bytes_per_token": 6.0,
}


def _bench_async(run_dir, etas):
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "async",
        "--run-dir",
        str(run_dir),
        "--steps",
        "3",
        "--etas",
        etas,
        "--poll-s",
        "0.05",
        *TINY,
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(run_dir / "async.json", encoding="utf-8") as f:
        result = json.load(f)
    records = {}
    for name in os.listdir(run_dir / "arms"):
        with open(run_dir / "arms" / name / "bench_arm.json", encoding="utf-8") as f:
            records[int(name.split("-")[0][3:])] = json.load(f)
    return run_dir, proc.stdout, result, records


@pytest.fixture(scope="module")
def async_run(tmp_path_factory):
    return _bench_async(tmp_path_factory.mktemp("bench"), "0")


def _check_arms(result, records, stdout):
    rows = {r["eta"]: r for r in result["rows"]}
    assert sorted(records) == sorted(rows)
    for eta, rec in records.items():
        steps = rec["steps"]
        assert [s["step"] for s in steps] == [1, 2, 3]
        assert all(s["groups"] == 2 for s in steps)
        # steps 2..3 on the learner's clock; step 1 holds the cold start
        span = steps[1]["step_s"] + steps[2]["step_s"]
        row = rows[eta]
        assert row["groups_per_s"] == pytest.approx(4 / span)
        assert row["trained_tokens_per_s"] == pytest.approx((steps[1]["n_tokens"] + steps[2]["n_tokens"]) / span)
        assert row["learner_wait_frac"] == pytest.approx((steps[1]["wait_s"] + steps[2]["wait_s"]) / span)
        busy = span - steps[1]["wait_s"] - steps[2]["wait_s"]
        assert row["learner_us_per_token"] == pytest.approx(1e6 * busy / (steps[1]["n_tokens"] + steps[2]["n_tokens"]))
        # one reading of the generator and the CPU per step count once the generator answers,
        # not one per poll: each reading costs the measured services CPU
        read = [s["steps"] for s in rec["samples"] if s["busy_s"] is not None]
        assert read == sorted(set(read)) and 3 in read
        # the generator's busy seconds between where step 1 and step 3 were first seen
        first = next(s for s in rec["samples"] if s["steps"] >= 1)
        last = next(s for s in rec["samples"] if s["steps"] >= 3)
        assert row["gen_idle_frac"] == pytest.approx(
            1 - (last["busy_s"] - first["busy_s"]) / (last["uptime_s"] - first["uptime_s"])
        )
        assert 0.0 <= row["gen_idle_frac"] < 1.0 and row["gen_tokens_per_busy_s"] > 0  # the engine's counter
        # the engine's split of its busy time, and CPU seconds by process over the same window
        assert row["gen_prefill_s_per_step"] + row["gen_decode_s_per_step"] <= row["t_gen_s"] + 1e-9
        assert row["gen_reprefill_frac"] == pytest.approx(
            (last["reprefill_tokens"] - first["reprefill_tokens"]) / (last["prefill_tokens"] - first["prefill_tokens"])
        )
        assert 0.0 <= row["gen_reprefill_frac"] <= 1.0
        assert row["gen_prefix_hit_frac"] == 0.0  # the recipe keeps generator.embedded.prefix_cache_tokens at 0
        assert row["gen_join_copy_frac"] == pytest.approx(
            (last["join_copies"] - first["join_copies"]) / max(1, last["joins"] - first["joins"])
        )
        assert row["gen_decode_ms_per_row"] == pytest.approx(
            1e3 * (last["decode_s"] - first["decode_s"]) / (last["decode_rows"] - first["decode_rows"])
        )
        cpu = row["cpu_s_per_step"]
        assert {"launcher", "generator", "learner", "rollout", "retriever", "buffer"} <= set(cpu)
        assert cpu["learner"] == pytest.approx((last["cpu_s"]["learner"] - first["cpu_s"]["learner"]) / 2)
        assert cpu["learner"] > 0 and cpu["generator"] > 0 and 0 < row["cpu_busy_frac"] <= 1.05
        assert row["staleness_mean"] <= eta
        if len(os.sched_getaffinity(0)) >= 2:  # generation and training pinned apart
            assert f"launcher.cpu_affinity.generator=[{min(os.sched_getaffinity(0))}]" in rec["argv"]
        assert f"| {eta} | {row['step_wall_s']:.3g} |" in stdout
    base = rows[min(rows)]
    t_gen, t_train = base["t_gen_s"], base["t_train_s"]
    assert result["bound"] == pytest.approx((t_gen + t_train) / max(t_gen, t_train))
    assert result["idle_floor"] == pytest.approx(max(0.0, 1 - t_gen / t_train))
    assert "machine bound" in stdout
    return rows


def test_async_figures_follow_from_the_arms_measurements(async_run):
    run_dir, stdout, result, records = async_run
    rows = _check_arms(result, records, stdout)
    assert rows[0]["speedup"] == 1.0
    assert (run_dir / "async.png").stat().st_size > 1000


@pytest.mark.slow
def test_two_arms_speedup_is_the_ratio_of_their_throughputs(tmp_path):
    _, stdout, result, records = _bench_async(tmp_path, "0,2")
    rows = _check_arms(result, records, stdout)
    assert rows[2]["speedup"] == pytest.approx(rows[2]["groups_per_s"] / rows[0]["groups_per_s"])
    assert "target (eta 2 >= 1.5x synchronous" in stdout


def test_speedups_bound_and_target_from_given_numbers():
    rest = {
        "step_wall_s": 10.0,
        "trained_tokens_per_s": 1.0,
        "context_tokens_per_s": 1.0,
        "reward_final": 0.1,
        "learner_wait_frac": 0.0,
        "t_gen_s": 4.0,
        "t_train_s": 6.0,
    }
    base = dict(rest, groups_per_s=0.4, gen_idle_frac=0.6)
    fast = dict(rest, groups_per_s=0.62, gen_idle_frac=0.05)
    result = asynchrony.analyze({0: base, 2: fast, 4: dict(fast, groups_per_s=0.5)})
    assert [r["speedup"] for r in result["rows"]] == pytest.approx([1.0, 1.55, 1.25])
    assert result["bound"] == pytest.approx(10 / 6) and result["idle_floor"] == pytest.approx(1 / 3)
    assert result["target_met"] is True
    assert asynchrony.analyze({0: base, 2: dict(fast, gen_idle_frac=0.33)})["target_met"] is False
    assert asynchrony.analyze({0: base, 2: dict(fast, groups_per_s=0.59)})["target_met"] is False
    # issue #19's targets: 1.55x of a 1.67x bound is 93%; re-prefill was not measured, so not met
    targets = {t["target"]: (t["per_repeat"], t["met"]) for t in result["targets"]}
    assert targets == {
        "eta 2 at >= 90% of its repeat's machine bound": (pytest.approx([0.93]), True),
        "generator idle < 10% at eta 2": ([0.05], True),
        "re-prefill < 5% of prefill tokens at eta 2": ([None], False),
    }
    measured = asynchrony.analyze({0: base, 2: dict(fast, gen_reprefill_frac=0.049)})
    assert [t["met"] for t in measured["targets"]] == [True, True, True]
    resent = asynchrony.analyze({0: base, 2: dict(fast, gen_reprefill_frac=0.05)})
    assert [t["met"] for t in resent["targets"]] == [True, True, False]
    text = asynchrony.render(result)
    assert "| re-prefill < 5% of prefill tokens at eta 2 | - | NOT met |" in text
    assert "| eta 2 at >= 90% of its repeat's machine bound | 93% | MET |" in text
    assert "(4.00 + 6.00) / 6.00 = 1.67x; best measured speed-up 1.55x" in text
    assert "at least 1 - t_gen / t_train = 33%" in text and "1.5x synchronous, generator idle < 10%): MET" in text


def test_repeats_take_the_median_of_each_repeats_own_ratio():
    rest = {
        "step_wall_s": 10.0,
        "trained_tokens_per_s": 1.0,
        "context_tokens_per_s": 1.0,
        "reward_final": 0.1,
        "learner_wait_frac": 0.0,
        "t_gen_s": 4.0,
        "t_train_s": 6.0,
    }

    def rep(base_gps, fast_gps, idle):
        return {
            0: dict(rest, groups_per_s=base_gps, gen_idle_frac=0.5),
            2: dict(rest, groups_per_s=fast_gps, gen_idle_frac=idle),
        }

    # a slow repeat halves both arms: its ratio (1.6) counts, not its throughput
    result = asynchrony.analyze(rep(0.4, 0.64, 0.05), rep(0.2, 0.32, 0.12), rep(0.4, 0.56, 0.07))
    two = result["rows"][1]
    assert two["speedups"] == pytest.approx([1.6, 1.6, 1.4]) and two["speedup"] == pytest.approx(1.6)
    assert two["groups_per_s"] == pytest.approx(0.56) and two["gen_idle_frac"] == pytest.approx(0.07)
    assert result["repeats"] == 3 and result["target_met"] is True
    # every repeat's bound here is (4 + 6) / 6 = 1.67x: 1.6x is 96% of it, 1.4x 84%
    assert two["bound_fracs"] == pytest.approx([0.96, 0.96, 0.84])
    text = asynchrony.render(result)
    assert (
        "eta 2 over 3 repeats: speed-up 1.60x, 1.60x, 1.40x; generator idle 5%, 12%, 7%; of each repeat's own bound 96%, 96%, 84%"
        in text
    )
    assert "dropped as stale" not in text  # the arms' summaries above have no count
    # each repeat is judged: one at 84% of its bound, one with the generator idle 12%
    assert [(t["per_repeat"], t["met"]) for t in result["targets"][:2]] == [
        (pytest.approx([0.96, 0.96, 0.84]), False),
        ([0.05, 0.12, 0.07], False),
    ]
    # the learner's time per trained token against its repeat's eta-0 arm: the machine's drift
    drift = [
        {eta: dict(arm, learner_us_per_token=us * (1 + eta / 2 * s)) for eta, arm in r.items()}
        for r, us, s in zip((rep(0.4, 0.64, 0.05), rep(0.2, 0.32, 0.12)), (500.0, 800.0), (0.02, 0.25))
    ]
    drifted = asynchrony.analyze(*drift)
    assert "learner_slowdowns" not in drifted["rows"][0]
    assert drifted["rows"][1]["learner_slowdowns"] == pytest.approx([0.02, 0.25])
    assert "measured the machine as much as the overlap): eta 2 +2%, +25%" in asynchrony.render(drifted)
    assert "the same work in every arm" not in text  # not measured above: nothing said
    runs = [
        {eta: dict(arm, dropped_stale=d * eta) for eta, arm in r.items()}
        for r, d in zip((rep(0.4, 0.64, 0.05), rep(0.2, 0.32, 0.12), rep(0.4, 0.56, 0.07)), (3, 5, 4))
    ]
    assert "generated for nothing): eta 0: 0, eta 2: 8" in asynchrony.render(asynchrony.analyze(*runs))


def test_scale_from_given_numbers_and_the_report(async_run, tmp_path):
    run_dir = async_run[0]
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(INPUTS))
    assert main(["scale", "--run-dir", str(run_dir), "--inputs", str(inputs)]) == 0
    with open(run_dir / "scale.json", encoding="utf-8") as f:
        result = json.load(f)
    a, s = scale.ASSUMPTIONS, result["model"]["seconds"]
    ctx_tokens = 1280 * 3.0 * 1800
    assert s["learner (DeepSpeed)"] == pytest.approx(10 * 3.09e9 * ctx_tokens / (8 * 989e12 * 0.35))
    assert s["retriever (Flat, CPU)"] == pytest.approx(1280 * 2 * 2 * 21e6 * 768 / (8.0e9 / 2 * 64))
    assert s["replay buffer (put + get)"] == pytest.approx(ctx_tokens * 6.0 / 1e6 * (1 / 50 + 1 / 400))
    assert result["model"]["bottleneck"] == max(s, key=s.get) == "retriever (Flat, CPU)"
    assert a["gpus"] == 16
    path = write_report(
        str(run_dir),
        ReportHeader(
            command="python -m benchmarks all", started="now", minutes=1.0, machine_start="m", machine_end="m"
        ),
    )
    text = open(path, encoding="utf-8").read()
    assert "![async](async.png)" in text and "bottleneck: **retriever (Flat, CPU)**" in text
    assert "## Staleness: decoupled loss against plain PPO\n\n(not run)" in text
    with open(run_dir / "report.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["async"]["bound"] == async_run[2]["bound"] and report["scale"]["model"]["seconds"] == s


def test_a_missing_bench_module_leaves_the_others_usable(monkeypatch, capsys):
    monkeypatch.setitem(command.BENCHES, "later", "benchmarks.harness.not_written_yet")
    assert main(["later"]) == 2
    assert "not available (benchmarks.harness.not_written_yet is not installed)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["scale", "--help"])
    assert e.value.code == 0 and "--inputs" in capsys.readouterr().out


def test_the_installed_command_says_where_bench_went(capsys):
    from areal_mem.app.cli import main as installed_main

    assert installed_main(["bench", "async", "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "from a checkout run `python -m benchmarks async --steps 3`" in err


def test_a_bench_that_plots_refuses_before_it_starts_without_matplotlib(monkeypatch, capsys, tmp_path):
    """`async` once ran its arms for ten minutes, then refused for want of matplotlib: now the
    modules a bench needs are checked before it starts anything."""
    import importlib.util

    from benchmarks.harness import output

    real = importlib.util.find_spec
    monkeypatch.setattr(
        output.extras.importlib.util, "find_spec", lambda n, *a: None if n == "matplotlib" else real(n, *a)
    )
    started = []
    monkeypatch.setattr(asynchrony, "run", lambda args: started.append(args) or 0)
    for name in ("async", "staleness", "memory", "paper", "all"):
        with pytest.raises(SystemExit) as e:
            main([name, "--run-dir", str(tmp_path)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"python -m benchmarks {name} needs matplotlib, a core dependency of areal-mem" in err
    assert started == [] and not os.listdir(tmp_path)
    # the benches that draw nothing do not ask for it
    parser = command.build_parser()
    assert [parser.parse_args([name])._needs for name in ("seeds", "soak", "eval")] == [(), (), ()]


def test_the_targets_are_options_with_defaults():
    args = command.build_parser().parse_args(["async", "--target-eta", "4", "--target-speedup", "1.2"])
    t = asynchrony.targets_of(args)
    assert t == asynchrony.AsyncTargets(eta=4, speedup=1.2, idle=0.10, bound_share=0.90, reprefill=0.05)
    rest = {"step_wall_s": 1.0, "trained_tokens_per_s": 1.0, "context_tokens_per_s": 1.0, "reward_final": 0.0}
    rest.update(learner_wait_frac=0.0, t_gen_s=4.0, t_train_s=6.0, gen_idle_frac=0.05)
    arms = {0: dict(rest, groups_per_s=0.4), 2: dict(rest, groups_per_s=0.44), 4: dict(rest, groups_per_s=0.5)}
    assert asynchrony.analyze(arms)["target_met"] is False  # eta 2 at 1.1x of the default 1.5x
    result = asynchrony.analyze(arms, targets=t)  # eta 4 at 1.25x of 1.2x
    assert result["target_met"] is True and result["thresholds"]["eta"] == 4
    text = asynchrony.render(result)
    assert "target (eta 4 >= 1.2x synchronous, generator idle < 10%): MET" in text
    assert "| generator idle < 10% at eta 4 | 5% | MET |" in text


def test_the_installed_package_does_not_import_the_benchmarks():
    import re

    pattern = re.compile(r"^\s*(from|import)\s+benchmarks\b", re.M)
    for top in ("areal_mem", "rollout", "learner", "retriever"):
        for folder, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith(".py"):
                    with open(os.path.join(folder, name), encoding="utf-8") as f:
                        assert not pattern.search(f.read()), os.path.join(folder, name)
