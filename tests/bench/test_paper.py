"""`python -m benchmarks paper`: per-arm, per-seed EM by question type, costs, sign tests and targets,
collected from written runs (the training itself is the `areal-mem train` the seeds bench runs)."""

import json
import os
import pathlib
import shutil

import pytest

from benchmarks.harness.command import main
from benchmarks.harness.paper import arm_overrides, learner_cost

TYPES = ["single", "single", "bridge", "bridge", "bridge", "comparison"]
PREFILL_MS = {"bridge": 2000.0, "comparison": 1800.0, "single": 1000.0}
PREFILL_REACT = {"bridge": 3000.0, "comparison": 2400.0, "single": 900.0}


def _run(root, arm, seed, sft, rl, prefill, train_rows, world="w0", recorded=False, decode=None, demos=None):
    """One finished arm: eval/start and eval/final (per question EM, typed), the summaries the
    eval writes, the learner's train metrics, the train summary, and its world: files hashed as
    `world` says (arms of one seed on "w0" have the same bytes), the manifest in `<run>/world`
    and the resolved config naming it relative to where the run was started (not here), as a
    run trained before the summary recorded it; `recorded`: the summary has it (and the
    manifest is gone); `decode`: decode tokens by type, as evaluations record them since
    2026-12-07; `demos`: (SFT epochs, the token count of each demonstration row)."""
    run = root / arm / f"s{seed}"
    sha = {k: f"{world}-{seed}-{k}" for k in ("corpus", "train", "dev", "test")}
    if not recorded:
        (run / "world").mkdir(parents=True)
        (run / "world" / "manifest.json").write_text(json.dumps({"seed": seed, "sha256": sha}))
    for tag, ems in (("start", sft), ("final", rl)):
        folder = run / "eval" / tag
        folder.mkdir(parents=True)
        recs = [{"id": f"q{i}", "em": em, "type": t} for i, (em, t) in enumerate(zip(ems, TYPES))]
        folder.joinpath("results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        by_type = {}
        for t in sorted(set(TYPES)):
            sel = [e for e, tt in zip(ems, TYPES) if tt == t]
            pct = 100 * sum(sel) / len(sel)
            by_type[t] = {"questions": len(sel), "em": pct, "f1": pct, "mean_prefill_tokens": prefill[t]}
            if decode:
                by_type[t]["mean_decode_tokens"] = decode[t]
                if t == "bridge":
                    by_type[t]["mean_hops_found"] = 1.0 + (tag == "final")
            by_type[t]["golden_in_search_rate"] = 50.0 + (tag == "final") * 25.0
            if t == "bridge":
                by_type[t]["first_hop_in_search_rate"] = 80.0
        summary = {
            "em": 100 * sum(ems) / len(ems),
            "f1": 100 * sum(ems) / len(ems),
            "mean_tool_calls": 1.5,
            "mean_prefill_tokens": sum(prefill.values()) / 3,
            "peak_context_tokens": 900,
            "context_tokens_by_turn": [{"turn": 0, "mean": 400.0}, {"turn": 1, "mean": 650.4}],
            "by_type": by_type,
            **({"mean_decode_tokens": sum(decode.values()) / 3} if decode else {}),
        }
        folder.joinpath("summary.json").write_text(json.dumps(summary))
    config = f"world:\n  dir: runs/paper/{arm}/s{seed}/world\n"
    if demos:
        epochs, lengths = demos
        config += f"learner:\n  sft:\n    epochs: {epochs}\n"
        (run / "sft").mkdir()
        rows = [{"input_ids": [1] * n, "prompt_len": 1} for n in lengths]
        (run / "sft" / "demos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run.joinpath("train_config.yaml").write_text(config)
    run.joinpath("metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train_rows))
    summary = {"stage_s": {"sft": 600.0, "rl": 300.0}, "wall_s": 1200.0}
    run.joinpath("train_summary.json").write_text(
        json.dumps({**summary, **({"world_sha256": sha} if recorded else {})})
    )


def test_learner_cost_is_tokens_per_trajectory_and_seconds_per_step(tmp_path):
    rows = [
        {"kind": "sft", "step": 1},
        {"kind": "train", "context_tokens": 500.0, "contexts": 3.0, "trajectories": 10, "step_s": 2.0},
        {"kind": "train", "context_tokens": 400.0, "contexts": 2.0, "trajectories": 10, "step_s": 4.0},
        {"kind": "train", "context_tokens": 600.0, "contexts": 4.0, "trajectories": 10, "step_s": 3.0},
        {"kind": "eval_dev", "em": 10.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert learner_cost(str(tmp_path)) == {"sft_steps": 1, "steps": 3, "tokens_per_traj": 1500.0, "step_s": 3.0}


def test_arm_set_overrides_one_arm_after_the_common_ones():
    arms = ["memsearcher", "react"]
    out = arm_overrides(arms, ["learner.steps=50"], ["react:learner.sft.epochs=15", "react:learner.steps=60"])
    assert out["memsearcher"] == ["rollout.workflow=memsearcher", "eval.method=memsearcher", "learner.steps=50"]
    assert out["react"] == [
        "rollout.workflow=react",
        "eval.method=react",
        "learner.steps=50",
        "learner.sft.epochs=15",
        "learner.steps=60",  # the arm's own comes later: it wins
    ]
    with pytest.raises(SystemExit, match="names arm 'reakt'"):
        arm_overrides(arms, [], ["reakt:learner.sft.epochs=15"])
    with pytest.raises(SystemExit, match="must be ARM:key.sub=value"):
        arm_overrides(arms, [], ["learner.sft.epochs=15"])
    # what makes an arm itself, or the run its seed's, is the bench's: refused by name, not overridden
    bench_keys = [
        (["rollout.workflow=react"], []),
        ([], ["memsearcher:seed=3"]),
        (["run_dir=x"], []),
        (["rollout[workflow]=react"], []),  # OmegaConf's bracket form of the same key
        (["+seed=1"], []),
        ([], ["react: eval.method =memsearcher"]),
    ]
    for common, own in bench_keys:
        with pytest.raises(SystemExit, match="is the bench's to set"):
            arm_overrides(arms, common, own)
    # a run's own outputs: one path for every arm (or every seed of one) would be shared
    for common, own in ((["learner.sft.out_dir=/tmp/sft"], []), ([], ["react:eval[out_dir]=/tmp/e"])):
        with pytest.raises(SystemExit, match="is each run's own output"):
            arm_overrides(arms, common, own)
    assert arm_overrides(arms, ["world.dir=/tmp/w"], [])["react"][-1] == "world.dir=/tmp/w"  # an input may be shared


def test_collect_reports_both_arms_by_type_with_sign_tests_and_targets(tmp_path, capsys):
    train = [
        {"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 2.0, "wait_s": 0.5}
    ]
    # MemSearcher: bridge 1/3 -> 3/3 (doubled), single 1/2 -> 2/2
    _run(tmp_path, "memsearcher", 0, [1, 0, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0], PREFILL_MS, train)
    # ReAct: bridge 1/3 -> 1/3, one single broken
    sft = [{"kind": "sft", "step": 1}, {"kind": "sft", "step": 2}]
    _run(tmp_path, "react", 0, [1, 1, 0, 1, 0, 0], [0, 1, 0, 1, 0, 1], PREFILL_REACT, sft + train)
    out = tmp_path / "reports"
    argv = ["paper", "--run-dir", str(tmp_path), "--seeds", "0", "--collect-only", "--report-dir", str(out)]
    assert main(argv) == 0
    rep = json.loads((out / "paper.json").read_text())
    (ms,), (re,) = rep["arms"]["memsearcher"]["runs"], rep["arms"]["react"]["runs"]
    assert ms["sft"]["by_type"]["bridge"]["em"] == pytest.approx(100 / 3)
    assert ms["rl_vs_sft"] == {"fixed": 3, "broken": 0, "p": 0.25}
    assert ms["rl_vs_sft_bridge"] == {"fixed": 2, "broken": 0, "p": 0.5}
    assert re["rl_vs_sft"] == {"fixed": 1, "broken": 1, "p": 1.0}
    assert ms["learner"] == {
        "sft_steps": 0,
        "steps": 1,
        "tokens_per_traj": 750.0,
        "step_s": 1.5,
        "sft_tokens": None,  # no demonstrations written
    }  # 2.0 s less 0.5 s waiting
    # after RL, MemSearcher right / ReAct wrong on q0, q2, q4; the reverse on q5
    (vs,) = rep["memsearcher_vs_react"]
    assert vs["all"] == {"wins": 3, "losses": 1, "p": 0.625} and vs["bridge"]["wins"] == 2
    doubled, cheaper = rep["targets"]
    assert doubled["met"] and doubled["numbers"] == "seed 0: 33.3% -> 100.0%"
    assert not cheaper["met"] and "prefill 0.67x ReAct's" in cheaper["numbers"]  # bridge: 2000 / 3000 > 0.5
    text = (out / "paper.md").read_text()
    row = "| memsearcher | 0 | 33.3 -> **100.0** | 0.0 -> **0.0** | 50.0 -> **100.0** | 33.3 -> **83.3** | 3 / 0 (p 0.25) |"
    assert row + " 2 / 0 (p 0.5) |" in text
    assert "| memsearcher | 0 | 80.0 -> 80.0 | 50.0 -> 75.0 | 33.3 -> 100.0 |" in text  # where bridges were lost
    assert "| react | 0 | 1.50 -> 1.50 | 3,000 | 2,400 | 900 | 2,100 | - | - | 900 | 400 / 650 |" in text
    assert "| react | 0 | 2 | - | 1 | 750 | 1.50 | - | 10.0 / 5.0 / 20.0 |" in text  # 1 RL step: no reward trend
    assert "**not met**: after RL, MemSearcher's bridge EM at least ReAct's" in text
    assert (out / "paper.png").exists()
    assert "seed 0, after RL: MemSearcher right where ReAct is wrong on 3 questions" in capsys.readouterr().out


def test_every_finished_seed_is_reported_and_judged(tmp_path):
    """Targets over every seed count only finished seeds; one seed per invocation merges."""
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    _run(tmp_path, "memsearcher", 0, [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], PREFILL_MS, train)
    _run(tmp_path, "memsearcher", 1, [0, 0, 1, 0, 0, 0], [1, 1, 1, 0, 0, 1], PREFILL_MS, train)
    argv = ["paper", "--run-dir", str(tmp_path), "--seeds", "1", "--collect-only", "--arms", "memsearcher"]
    assert main(argv) == 0
    rep = json.loads((tmp_path / "paper.json").read_text())
    assert rep["seeds"] == [0, 1]  # seed 0 was finished before: reported too
    (doubled,) = rep["targets"]
    assert not doubled["met"] and doubled["numbers"] == "seed 0: 0.0% -> 100.0%, seed 1: 33.3% -> 33.3%"


def test_records_merge_seeds_whose_run_dirs_are_gone(tmp_path):
    """Seed 0 runs in one session, seed 1 in the next after /tmp was wiped: the records kept in
    --records carry the per-question answers, so the pooled and the head-to-head sign tests still
    pair every seed."""
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    records = tmp_path / "records"
    first, second = tmp_path / "first", tmp_path / "second"
    _run(first, "memsearcher", 0, [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], PREFILL_MS, train)
    _run(first, "react", 0, [0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], PREFILL_REACT, train)
    base = ["paper", "--collect-only", "--records", str(records)]
    assert main(base + ["--run-dir", str(first), "--seeds", "0"]) == 0
    assert sorted(os.listdir(records)) == ["memsearcher_s0.json", "react_s0.json"]
    kept = json.loads((records / "memsearcher_s0.json").read_text())
    assert kept["answers"]["q2"] == ["bridge", 0.0, 1.0]
    assert "answers" not in json.loads((first / "paper.json").read_text())["arms"]["memsearcher"]["runs"][0]
    shutil.rmtree(first)
    _run(second, "memsearcher", 1, [1, 0, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1], PREFILL_MS, train)
    _run(second, "react", 1, [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], PREFILL_REACT, train)
    assert main(base + ["--run-dir", str(second), "--seeds", "1"]) == 0
    rep = json.loads((second / "paper.json").read_text())
    assert rep["seeds"] == [0, 1]
    # seed 0 fixed 6, seed 1 fixed 2 (q1, q5) and broke 1 (q2)
    assert rep["arms"]["memsearcher"]["pooled_rl_vs_sft"] == {"fixed": 8, "broken": 1, "p": 0.0390625}
    vs0, vs1 = rep["memsearcher_vs_react"]
    assert vs0["all"] == {"wins": 4, "losses": 0, "p": 0.125} and vs0["bridge"]["wins"] == 2
    assert vs1["all"] == {"wins": 3, "losses": 0, "p": 0.25}
    # and the head-to-head pooled over the seeds: 7 wins, no loss
    pooled = rep["memsearcher_vs_react_pooled"]
    assert pooled["all"] == {"wins": 7, "losses": 0, "p": 2 / 2**7}
    assert pooled["bridge"]["wins"] == vs0["bridge"]["wins"] + vs1["bridge"]["wins"]
    text = (second / "paper.md").read_text()
    assert (
        "- pooled over seeds 0, 1, after RL: MemSearcher right where ReAct is wrong on 7 questions, the reverse on 0 (p = 0.016)"
        in text
    )


def test_a_record_without_answers_is_reported_unpaired_and_a_bad_one_is_named(tmp_path, capsys):
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    records = tmp_path / "records"
    _run(tmp_path / "runs", "memsearcher", 0, [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], PREFILL_MS, train)
    _run(tmp_path / "runs", "react", 0, [0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], PREFILL_REACT, train)
    argv = ["paper", "--collect-only", "--records", str(records), "--run-dir", str(tmp_path / "runs")]
    assert main(argv + ["--seeds", "0"]) == 0
    shutil.rmtree(tmp_path / "runs")
    rec = json.loads((records / "react_s0.json").read_text())
    rec["answers"] = None  # kept before records held the answers: its own sign tests stay, no pairing
    (records / "react_s0.json").write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(argv + ["--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "| 2 / 0 (p 0.5) | 1 / 0 (p 1) |" in out  # react, seed 0: all and bridge, from the record
    assert "seed 0: no pairing of the two workflows" in out
    (records / "react_s1.json").write_text(json.dumps(rec))  # seed 0's record under seed 1's name
    with pytest.raises(SystemExit, match="react_s1.json holds react seed 0"):
        main(argv)
    (records / "react_s1.json").write_text("{")
    with pytest.raises(SystemExit, match="react_s1.json is not a run record"):
        main(argv)


def test_one_arm_per_invocation_reports_both_arms_of_the_run_dir_and_the_records(tmp_path, monkeypatch):
    """`--arms react --seeds 1` trains ReAct's seed 1 only; the report (which overwrites the
    committed one) still has every arm found in the run dir and in the records."""
    import benchmarks.harness.paper as paper

    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    records, runs = tmp_path / "records", tmp_path / "runs"
    _run(tmp_path / "old", "memsearcher", 0, [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], PREFILL_MS, train)
    assert main(["paper", "--collect-only", "--records", str(records), "--run-dir", str(tmp_path / "old")]) == 0
    _run(runs, "memsearcher", 1, [0, 0, 1, 0, 0, 0], [1, 1, 1, 0, 0, 1], PREFILL_MS, train)
    trained = []

    def fake_train(configs, run_dir, seed, overrides, label):
        trained.append(label)
        _run(runs, "react", seed, [0] * 6, [1, 0, 1, 0, 0, 0], PREFILL_REACT, train)

    monkeypatch.setattr(paper, "train_run", fake_train)
    argv = ["paper", "--records", str(records), "--run-dir", str(runs), "--arms", "react", "--seeds", "1"]
    assert main(argv) == 0
    assert trained == ["react seed 1"]
    rep = json.loads((runs / "paper.json").read_text())
    assert {a: [r["seed"] for r in v["runs"]] for a, v in rep["arms"].items()} == {"memsearcher": [0, 1], "react": [1]}
    assert sorted(os.listdir(records)) == ["memsearcher_s0.json", "memsearcher_s1.json", "react_s1.json"]
    (vs,) = rep["memsearcher_vs_react"]
    assert vs["seed"] == 1 and vs["all"]["wins"] == 2
    # a third workflow's arm, trained earlier into the run dir: reported, and its seed 5 is not
    # one the MemSearcher / ReAct targets ask for
    _run(runs, "search_r1", 5, [0] * 6, [1] * 6, PREFILL_MS, train)
    assert main(["paper", "--collect-only", "--records", str(records), "--run-dir", str(runs)]) == 0
    rep = json.loads((runs / "paper.json").read_text())
    assert list(rep["arms"]) == ["memsearcher", "react", "search_r1"] and rep["seeds"] == [0, 1, 5]
    assert rep["targets"][0]["numbers"] == "seed 0: 0.0% -> 100.0%, seed 1: 33.3% -> 33.3%"


def test_runs_on_different_worlds_are_not_paired_and_a_record_is_not_replaced_by_another_world(tmp_path):
    """Question ids are positions in a split: two arms whose worlds differ in a byte must not be
    paired or judged against each other, and a kept record is not overwritten by another world's."""
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    runs, records = tmp_path / "runs", tmp_path / "records"
    _run(runs, "memsearcher", 0, [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], PREFILL_MS, train, recorded=True)
    _run(runs, "react", 0, [0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], {k: 9e9 for k in PREFILL_REACT}, train, world="w1")
    argv = ["paper", "--collect-only", "--run-dir", str(runs), "--records", str(records)]
    assert main(argv) == 0
    rep = json.loads((runs / "paper.json").read_text())
    assert rep["arms"]["react"]["runs"][0]["world"]["test"] == "w1-0-test"  # from <run>/world: not from here
    assert rep["arms"]["memsearcher"]["runs"][0]["world"]["test"] == "w0-0-test"  # as the summary recorded it
    (vs,) = rep["memsearcher_vs_react"]
    assert vs["all"] == {"wins": None, "losses": None, "p": None}
    cheaper = rep["targets"][1]
    assert not cheaper["met"] and cheaper["numbers"] == "seed 0: the two arms ran on different worlds, not compared"
    shutil.rmtree(runs / "react")
    _run(runs, "react", 0, [0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], PREFILL_REACT, train)  # now on w0
    (runs / "paper.json").unlink()
    with pytest.raises(SystemExit, match="react_s0.json was run on another world"):
        main(argv)
    assert json.loads((records / "react_s0.json").read_text())["world"]["test"] == "w1-0-test"  # kept
    # the report is still written, with the kept record standing for the seed
    assert json.loads((runs / "paper.json").read_text())["arms"]["react"]["runs"][0]["world"]["test"] == "w1-0-test"


def test_collect_without_finished_runs_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no finished run"):
        main(["paper", "--run-dir", str(tmp_path), "--collect-only"])


def test_the_paper_recipe_layers_on_the_debug_recipe_for_both_arms(tmp_path):
    from areal_mem.config import load_run
    from benchmarks.harness.arms import DEFAULT_CONFIG
    from benchmarks.harness.paper import ARMS, PAPER_CONFIG

    for arm in ARMS:
        cfg = load_run([DEFAULT_CONFIG, PAPER_CONFIG], [f"run_dir={tmp_path}", f"rollout.workflow={arm}"])
        assert [t.value for t in cfg.world.question_types] == ["single", "bridge", "comparison"]
        assert (cfg.rollout.workflow, cfg.learner.sft.threads, cfg.learner.steps) == (arm, 2, 100)
        assert cfg.rollout.format_score == 0.0 and len(cfg.world.bridge_chains) == 2


def test_react_gets_equal_sft_steps_by_default_and_a_given_arm_set_replaces_it(tmp_path, monkeypatch):
    """Without --arm-set, ReAct's arm trains 15 SFT epochs (a third of MemSearcher's rows per
    question); any --arm-set given replaces that default."""
    import benchmarks.harness.paper as paper

    calls = {}
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]

    def fake_train(configs, run_dir, seed, overrides, label):
        arm = os.path.basename(os.path.dirname(run_dir))
        calls[(os.path.basename(os.path.dirname(os.path.dirname(run_dir))), arm)] = overrides
        _run(pathlib.Path(os.path.dirname(os.path.dirname(run_dir))), arm, seed, [1] * 6, [1] * 6, PREFILL_MS, train)

    monkeypatch.setattr(paper, "train_run", fake_train)
    assert main(["paper", "--run-dir", str(tmp_path / "a"), "--seeds", "0"]) == 0
    assert calls[("a", "react")][-1] == "learner.sft.epochs=6"
    assert "learner.sft.epochs=6" not in calls[("a", "memsearcher")]
    argv = [
        "paper",
        "--run-dir",
        str(tmp_path / "b"),
        "--seeds",
        "0",
        "--arm-set",
        "memsearcher:learner.steps=3",
    ]
    assert main(argv) == 0
    assert calls[("b", "react")] == ["rollout.workflow=react", "eval.method=react"]
    assert calls[("b", "memsearcher")][-1] == "learner.steps=3"
    # only MemSearcher's arm: the default for ReAct does not apply, and is no error
    assert main(["paper", "--run-dir", str(tmp_path / "c"), "--seeds", "0", "--arms", "memsearcher"]) == 0
    assert ("c", "react") not in calls


def test_the_targets_ask_only_for_the_seeds_of_their_own_arms():
    from benchmarks.harness.paper import targets

    def ev(bridge_em):
        return {"by_type": {"bridge": {"em": bridge_em}}}

    results = {"memsearcher": {0: {"sft": ev(10.0), "rl": ev(25.0)}}, "search_r1": {5: {"sft": ev(0), "rl": ev(0)}}}
    (doubled,) = targets(results, [0, 5])
    assert doubled["met"] and doubled["numbers"] == "seed 0: 10.0% -> 25.0%"
    (doubled,) = targets({"memsearcher": results["memsearcher"], "react": {1: {}}}, [0, 1])
    assert not doubled["met"]  # ReAct's seed 1 is one MemSearcher lacks


def test_horizons_run_in_their_own_folders_and_are_compared_side_by_side(tmp_path, capsys):
    """--hops: each horizon's runs, records and report under h<hops>/, then one table of every
    horizon: bridge EM SFT -> RL and MemSearcher's prefill over ReAct's."""
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    _run(tmp_path / "h2", "memsearcher", 0, [0, 0, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0], PREFILL_MS, train)
    _run(tmp_path / "h2", "react", 0, [0, 0, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0], PREFILL_REACT, train)
    cheap = {"bridge": 1500.0, "comparison": 1800.0, "single": 1000.0}
    ms_decode, react_decode = {"bridge": 600.0, "comparison": 500.0, "single": 100.0}, dict.fromkeys(TYPES, 200.0)
    ms_train = [{**train[0], "context_tokens": 600.0}]  # 1,500 tokens a trajectory against 750
    # MemSearcher 3 epochs of 3 rows, ReAct 4 of 2: 3 x 4.5M and 4 x 3M tokens
    ms_demos, react_demos = (3, [2_000_000, 1_500_000, 1_000_000]), (4, [2_000_000, 1_000_000])
    for arm, rl, prefill, rows, decode, demos in (
        ("memsearcher", [1, 1, 1, 1, 1, 0], cheap, ms_train, ms_decode, ms_demos),
        ("react", [1, 1, 1, 0, 0, 0], PREFILL_REACT, train, react_decode, react_demos),
    ):
        _run(tmp_path / "h4", arm, 0, [0] * 6, rl, prefill, rows, decode=decode, demos=demos)
    records, out = tmp_path / "records", tmp_path / "reports"
    argv = ["paper", "--collect-only", "--hops", "2,4", "--run-dir", str(tmp_path), "--seeds", "0"]
    assert main(argv + ["--records", str(records), "--report-dir", str(out)]) == 0
    assert sorted(os.listdir(records / "h4")) == ["memsearcher_s0.json", "react_s0.json"]
    assert (out / "paper_h2.md").exists() and (out / "paper_h4.md").exists()
    rows = json.loads((out / "paper_horizons.json").read_text())["horizons"]
    assert [(r["hops"], r["arm"]) for r in rows] == [(2, "memsearcher"), (2, "react"), (4, "memsearcher"), (4, "react")]
    assert rows[2]["em_sft"] == 0.0 and rows[2]["em_rl"] == 100.0  # its three bridges, 0 -> 3
    ms_rows = rows[0::2]  # the ratios are on MemSearcher's row only
    assert [r["prefill_ratio"] for r in ms_rows] == [2000 / 3000, 0.5]
    assert [r["prefill_ratio_by_seed"] for r in ms_rows] == [{"0": 2000 / 3000}, {"0": 0.5}]
    assert [r["decode_ratio"] for r in ms_rows] == [None, 3.0]  # the 2-hop runs did not record it
    assert [r["learner_ratio"] for r in ms_rows] == [1.0, 2.0]
    assert not any("prefill_ratio" in r for r in rows[1::2])
    assert [r["sft_tokens"] for r in rows] == [None, None, 13_500_000, 12_000_000]
    text = (out / "paper_horizons.md").read_text()
    row = "| 4 | memsearcher | 0 | 0.0 -> **100.0** | 0.0 -> **83.3** | 1,500 | 600 | 1,500 | 0.50, 3.00, 2.00 | 0: 0.50 | 13.50 | 900 | 20.0 |"
    assert row in text
    assert "| 2 | react | 0 | 33.3 -> **33.3** | 16.7 -> **50.0** | 3,000 | - | 750 |  |  | - | 900 | 20.0 |" in text
    assert (
        "| 2 | memsearcher | 0 | 33.3 -> **66.7** | 16.7 -> **66.7** | 2,000 | - | 750 | 0.67, -, 1.00 | 0: 0.67 |"
        in text
    )
    assert "prefill per bridge question is below ReAct's at every horizon measured" in text
    # each horizon's own report has the decode and SFT tokens of its arms
    h4 = (out / "paper_h4.md").read_text()
    assert "| memsearcher | 0 | 1.50 -> 1.50 | 1,500 | 1,800 | 1,000 | 1,433 | 600 | 400 | 900 | 400 / 650 |" in h4
    assert "| react | 0 | 0 | 12.00 | 1 | 750 | 1.50 | - | 10.0 / 5.0 / 20.0 |" in h4
    assert "| memsearcher | 0 | 80.0 -> 80.0 | 50.0 -> 75.0 | 0.0 -> 100.0 | 1.00 -> 2.00 |" in h4
    assert (
        "| memsearcher | 0 | 80.0 -> 80.0 | 50.0 -> 75.0 | 33.3 -> 66.7 | - -> - |" in (out / "paper_h2.md").read_text()
    )
    # a horizon's own keys are the bench's with --hops
    with pytest.raises(SystemExit, match="with --hops the bench sets world.hops per horizon"):
        main(argv + ["world.hops=3"])
    with pytest.raises(SystemExit, match="with --hops the bench sets rollout.limits.max_turns"):
        main(argv + ["--arm-set", "react:rollout.limits.max_turns=9"])


def test_the_two_hop_horizon_is_the_recipe():
    """At 2 hops the horizon's limits are the recipe's own (a --hops 2 run is the recipe's run);
    longer horizons get a turn and 48 tokens a hop."""
    from areal_mem.config import load_run
    from benchmarks.harness.arms import DEFAULT_CONFIG
    from benchmarks.harness.paper import PAPER_CONFIG, horizon_overrides

    files = [DEFAULT_CONFIG, PAPER_CONFIG]
    recipe, two = load_run(files, ["run_dir=/tmp/x"]), load_run(files, ["run_dir=/tmp/x", *horizon_overrides(2)])
    assert two.world == recipe.world and two.rollout.limits == recipe.rollout.limits
    assert two.eval.max_turns == recipe.eval.max_turns == 4
    six = load_run(files, ["run_dir=/tmp/x", *horizon_overrides(6)])
    assert (six.world.hops, six.rollout.limits.max_turns, six.eval.max_turns) == (6, 8, 8)
    assert (six.rollout.limits.max_new_tokens, six.rollout.limits.max_memory_tokens) == (288, 288)


@pytest.mark.integration
def test_with_hops_react_trains_for_memsearchers_sft_tokens_on_the_demonstrations_the_runs_then_read(
    tmp_path, monkeypatch
):
    """--hops without --arm-set: both arms' oracle demonstrations are written in their run dirs
    (where `areal-mem train` finds and reads them) and ReAct's SFT epochs are MemSearcher's times
    its tokens over ReAct's, to the nearest epoch; a given --arm-set is used as it is."""
    import benchmarks.harness.paper as paper

    calls = {}
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]

    def fake_train(configs, run_dir, seed, overrides, label):
        arm = os.path.basename(os.path.dirname(run_dir))
        calls[arm] = overrides
        shutil.rmtree(os.path.join(run_dir, "world"), ignore_errors=True)  # the finished run's own, below
        _run(pathlib.Path(os.path.dirname(os.path.dirname(run_dir))), arm, seed, [1] * 6, [1] * 6, PREFILL_MS, train)
        epochs = [o.partition("=")[2] for o in overrides if o.startswith("learner.sft.epochs=")] or ["3"]
        with open(os.path.join(run_dir, "train_config.yaml"), "a", encoding="utf-8") as f:
            f.write(f"learner:\n  sft:\n    epochs: {epochs[-1]}\n")  # as the resolved config has it

    monkeypatch.setattr(paper, "train_run", fake_train)
    small = ["world.passages=300", "world.questions=60", "retriever.kind=bm25"]
    # ReAct first and alone: MemSearcher's demonstrations are written for the count all the same
    assert main(["paper", "--hops", "3", "--run-dir", str(tmp_path), "--seeds", "0", "--arms", "react", *small]) == 0
    tokens = {}
    for arm in ("memsearcher", "react"):
        demos = tmp_path / "h3" / arm / "s0" / "sft" / "demos.jsonl"
        tokens[arm] = sum(len(json.loads(line)["input_ids"]) for line in demos.read_text().splitlines())
        assert json.loads((demos.parent / "demos_stats.json").read_text())["tokens"] == tokens[arm]
    assert tokens["memsearcher"] > 2 * tokens["react"]  # a row a turn against a row a question
    epochs = round(3 * tokens["memsearcher"] / tokens["react"])  # the paper recipe's 3 for MemSearcher
    assert calls["react"][-1] == f"learner.sft.epochs={epochs}" and epochs != 6
    assert "memsearcher" not in calls
    # and its report has the SFT tokens it trained on
    rep = json.loads((tmp_path / "h3" / "paper_h3.json").read_text())
    assert rep["arms"]["react"]["runs"][0]["learner"]["sft_tokens"] == epochs * tokens["react"]
    # a given --arm-set replaces the count
    argv = ["paper", "--hops", "3", "--run-dir", str(tmp_path / "b"), "--seeds", "0", "--arms", "react", *small]
    assert main([*argv, "--arm-set", "react:learner.sft.epochs=2"]) == 0
    assert calls["react"][-1] == "learner.sft.epochs=2"
    assert not (tmp_path / "b" / "h3" / "memsearcher").exists()


def test_sft_tokens_are_the_stats_train_wrote_and_counted_only_for_older_runs(tmp_path):
    """`areal-mem train` counts the demonstrations' tokens as it writes them (`demos_stats.json`):
    the bench reads that count instead of the file; a run written before the count is counted."""
    from benchmarks.harness.paper import sft_tokens

    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "demos.jsonl").write_text("".join(json.dumps({"input_ids": [1] * n}) + "\n" for n in (3, 4)))
    (tmp_path / "train_config.yaml").write_text("learner:\n  sft:\n    epochs: 2\n")
    assert sft_tokens(str(tmp_path)) == 14  # no stats: counted, 2 epochs of 7
    (tmp_path / "sft" / "demos_stats.json").write_text(json.dumps({"questions": 2, "rows": 2}))
    assert sft_tokens(str(tmp_path)) == 14  # stats from before the count
    (tmp_path / "sft" / "demos_stats.json").write_text(json.dumps({"questions": 2, "rows": 2, "tokens": 100}))
    assert sft_tokens(str(tmp_path)) == 200  # the count train wrote
    (tmp_path / "sft" / "demos.jsonl").unlink()
    assert sft_tokens(str(tmp_path)) is None  # no demonstrations, no SFT tokens


def test_the_prefill_crossing_is_read_between_the_two_horizons_around_it():
    from benchmarks.harness.paper import horizons_markdown, prefill_crossing

    def rows(*points):
        out = []
        for h, ratio in points:
            row = {"hops": h, "seeds": [0], "em_sft": 0.0, "em_rl": 0.0, "all_sft": 0.0, "all_rl": 0.0}
            row.update(prefill=None, decode=None, learner=None, sft_tokens=None, peak_context=0, wall_min=1.0)
            out += [{**row, "arm": "memsearcher", "prefill_ratio": ratio, "decode_ratio": None, "learner_ratio": None}]
            out += [{**row, "arm": "react"}]
        return out

    cross = prefill_crossing(rows((2, 1.21), (3, 1.08), (6, 0.78)))
    assert cross["between"] == [3, 6] and cross["hops"] == pytest.approx(3.8)
    assert prefill_crossing(rows((2, 1.2), (4, 1.0), (6, 0.8)))["hops"] == 4.0  # equal at 4: it crosses there
    assert prefill_crossing(rows((2, 1.2), (3, 1.1))) is None  # still above
    assert prefill_crossing(rows((2, 0.9), (3, 0.8))) is None  # below from the start: no crossing measured
    assert prefill_crossing(rows((3, 1.1), (4, None), (6, 0.8)))["between"] == [3, 6]  # a run without the number
    # said in the horizons' report, also where it does not cross
    data = {"command": "x", "horizons": rows((2, 0.9), (4, 1.1))}
    assert "below ReAct's at 2 hops, not at 4." in horizons_markdown(data)
    data = {"command": "x", "horizons": rows((2, 1.2), (4, 1.1))}
    assert "below ReAct's nowhere in the horizons measured." in horizons_markdown(data)
    data = {"command": "x", "horizons": rows((3, 1.08), (6, 0.78))}
    text = horizons_markdown(data)
    assert "falls below ReAct's between 3 and 6 hops: at 3.8 hops" in text


def _rl_steps(rewards, sft_steps=0):
    """The learner's metrics of an SFT of `sft_steps` and one RL step per reward."""
    rows = [{"kind": "sft", "step": sft_steps}] if sft_steps else []
    row = {"kind": "train", "context_tokens": 300.0, "contexts": 2.0, "trajectories": 10, "step_s": 1.0}
    return rows + [{**row, "step": i + 1, "reward": r} for i, r in enumerate(rewards)]


def test_a_run_from_another_runs_sft_is_compared_with_it_and_each_rl_says_if_it_still_learned(tmp_path):
    """A run started from another run's SFT (`--rl-from`): its record pairs its answers after RL
    with the source's after RL (fixed: right here, wrong there), on all questions and on
    bridges, with the source's RL steps, EM and reward trend, and takes its SFT steps from the
    source's log (its own has none); every run's training reward, the 20 steps before the last
    20 against the last 20, says whether RL was still learning when it stopped."""
    src, more = tmp_path / "rl100", tmp_path / "rl200"
    start = [0, 0, 1, 0, 0, 1]  # one SFT model, one start evaluation
    # the source: 100 steps, reward 0.2 then 0.5 over its last 20 (still learning)
    _run(src, "memsearcher", 0, start, [1, 0, 0, 0, 1, 1], PREFILL_MS, _rl_steps([0.2] * 80 + [0.5] * 20, 40))
    # 200 steps from it: reward 0.3 then 0.4 (the last 20)
    _run(more, "memsearcher", 0, start, [1, 1, 1, 1, 0, 1], PREFILL_MS, _rl_steps([0.3] * 180 + [0.4] * 20))
    (more / "memsearcher" / "s0" / "rl_from.json").write_text(json.dumps({"source": str(src / "memsearcher" / "s0")}))
    out = tmp_path / "reports"
    argv = ["paper", "--run-dir", str(more), "--seeds", "0", "--collect-only", "--report-dir", str(out)]
    assert main(argv) == 0
    (run,) = json.loads((out / "paper.json").read_text())["arms"]["memsearcher"]["runs"]
    assert run["reward"] == {"window": 20, "before": pytest.approx(0.3), "last": pytest.approx(0.4)}
    assert run["learner"]["sft_steps"] == 40 and run["learner"]["steps"] == 200
    src_rec = run["rl_from"]
    assert src_rec["source"] == str(src / "memsearcher" / "s0") and src_rec["steps"] == 100
    assert src_rec["reward"] == {"window": 20, "before": pytest.approx(0.2), "last": pytest.approx(0.5)}
    # q1, q2, q3 right only here, q4 only there; of the bridges (q2-q4) two and one
    assert src_rec["vs_source"] == {"fixed": 3, "broken": 1, "p": 0.625}
    assert src_rec["vs_source_bridge"] == {"fixed": 2, "broken": 1, "p": 1.0}
    text = (out / "paper.md").read_text()
    assert "| memsearcher | 0 | 40 | - | 200 | 600 | 1.00 | 0.300 -> 0.400 | 10.0 / 5.0 / 20.0 |" in text
    row = "| memsearcher | 0 | 100 -> 200 | 33.3 -> **66.7** | 50.0 -> **83.3** | 3 / 1 (p 0.62) | 2 / 1 (p 1) |"
    assert row + " 0.200 -> 0.500 |" in text
    assert (
        "- memsearcher, pooled over seeds, against the runs they started from: right here and wrong there on 3" in text
    )
    # a source gone since the run's record was kept: the record's comparison stays
    records = tmp_path / "records"
    assert main([*argv, "--records", str(records)]) == 0
    shutil.rmtree(src)
    assert main([*argv, "--records", str(records)]) == 0
    kept = json.loads((records / "memsearcher_s0.json").read_text())
    assert kept["rl_from"]["vs_source"]["fixed"] == 3 and kept["learner"]["sft_steps"] == 40
    # a source that never finished its RL is named, with nothing to pair
    _run(src, "memsearcher", 0, start, [1, 0, 0, 0, 1, 1], PREFILL_MS, _rl_steps([0.2] * 100, 40))
    (src / "memsearcher" / "s0" / "train_summary.json").unlink()
    assert main(argv) == 0
    (run,) = json.loads((out / "paper.json").read_text())["arms"]["memsearcher"]["runs"]
    assert run["rl_from"]["rl"] is None and run["rl_from"]["vs_source"]["p"] is None
    assert "| memsearcher | 0 | - -> 200 | - | - | n/a | n/a | (" in (out / "paper.md").read_text()


def test_rl_from_trains_only_rl_on_the_sft_of_another_run(tmp_path, monkeypatch):
    """--rl-from: each run gets the same arm and seed's world, model, index, demonstrations, SFT
    model and start evaluation (linked, not copied), and its stage times up to them, so that
    `areal-mem train` builds, writes and evaluates none of them again; ReAct's SFT epochs are
    counted on the same demonstrations; a run whose SFT or start evaluation would differ from
    the source's is refused by key."""
    import areal_mem.app.tiny_model
    import areal_mem.app.world
    import areal_mem.retriever.build
    import benchmarks.harness.paper as paper
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import load_run, save_resolved
    from benchmarks.harness.paper import horizon_overrides, recipe_files

    configs = recipe_files(paper.argparse.Namespace(config=None))
    small = ["world.passages=300", "world.questions=60", "retriever.kind=bm25"]
    src = tmp_path / "rl100"

    def source(arm, *more):  # a finished 100-step arm's stages up to its start evaluation
        run = src / "h3" / arm / "s0"
        overrides = [f"run_dir={run}", "seed=0", f"rollout.workflow={arm}", f"eval.method={arm}"]
        return run, TrainPipeline(load_run(configs, [*overrides, *horizon_overrides(3), *small, *more]), evaluate=False)

    for arm in ("memsearcher", "react"):
        run, pipe = source(arm)
        pipe.prepare()
        pipe.demonstrations()
        (run / "sft" / "model").mkdir()
        (run / "sft" / "model" / "config.json").write_text("{}")
        (run / "eval" / "start").mkdir(parents=True)
        (run / "eval" / "start" / "summary.json").write_text(
            json.dumps({"em": 10.0, "questions": 12, "mean_turns": 2.0})
        )
        (run / "metrics.jsonl").write_text(json.dumps({"kind": "sft", "step": 30}) + "\n")  # its SFT's log
        stages = {"prepare": 1.0, "demos": 2.0, "sft": 600.0, "eval-start": 60.0, "rl": 300.0}
        (run / "stage_s.json").write_text(json.dumps({**stages, "rl_failed": 5.0, "eval-final": 60.0}))
    ms_tokens, react_tokens = (paper.epoch_tokens(str(src / "h3" / a / "s0")) for a in ("memsearcher", "react"))
    react_epochs = round(3 * ms_tokens / react_tokens)  # as the bench trained the source
    source("react", f"learner.sft.epochs={react_epochs}")  # its train_config.yaml says so

    def never(*args, **kwargs):
        raise AssertionError("a stage the source did ran again")

    for module, name in (
        (areal_mem.app.world, "build_world"),
        (areal_mem.app.tiny_model, "init_model"),
        (areal_mem.retriever.build, "build_index"),
        (TrainPipeline, "_run"),  # every stage in a child process (SFT, the evaluations)
    ):
        monkeypatch.setattr(module, name, never)
    seen = {}
    train = [{"kind": "train", "context_tokens": 300.0, "contexts": 2.5, "trajectories": 10, "step_s": 1.5}]
    shared = ["world/manifest.json", "model/config.json", "index/manifest.json", "sft/demos.jsonl"]
    shared += ["sft/model/config.json", "eval/start/summary.json"]

    def fake_train(configs, run_dir, seed, overrides, label):
        arm = os.path.basename(os.path.dirname(run_dir))
        cfg = load_run(configs, [f"run_dir={run_dir}", f"seed={seed}", *overrides])
        pipe = TrainPipeline(cfg)
        pipe.prepare()  # the linked world, model and index pass their checks and are not built
        seen[arm] = {
            "warm_start": pipe.warm_start(),  # found, not trained
            "start_em": pipe.eval(pipe.warm_start(), "start")["em"],  # found, not evaluated
            "stages": pipe.results["stage_s"],
            "overrides": overrides,
            "linked": [
                os.stat(os.path.join(run_dir, p)).st_ino == os.stat(src / "h3" / arm / "s0" / p).st_ino for p in shared
            ],
        }
        # what the rest of the run leaves, on the world it has (ReAct's epochs read MemSearcher's after)
        _run(tmp_path / "scratch", arm, seed, [0] * 6, [1] * 6, PREFILL_MS, train)
        shutil.rmtree(os.path.join(run_dir, "eval"))
        shutil.copytree(tmp_path / "scratch" / arm / f"s{seed}" / "eval", os.path.join(run_dir, "eval"))
        for name in ("metrics.jsonl", "train_summary.json"):
            shutil.copy(tmp_path / "scratch" / arm / f"s{seed}" / name, run_dir)
        save_resolved(cfg, os.path.join(run_dir, "train_config.yaml"))

    monkeypatch.setattr(paper, "train_run", fake_train)
    argv = ["paper", "--hops", "3", "--seeds", "0", "--rl-from", str(src)]
    assert main([*argv, "--run-dir", str(tmp_path / "rl200"), *small, "learner.steps=200"]) == 0
    assert set(seen) == {"memsearcher", "react"}
    for arm, got in seen.items():
        run = tmp_path / "rl200" / "h3" / arm / "s0"
        assert got["warm_start"] == str(run / "sft" / "model") and got["start_em"] == 10.0
        assert got["linked"] == [True] * len(shared)
        assert got["stages"] == {"prepare": 1.0, "demos": 2.0, "sft": 600.0, "eval-start": 60.0}
        assert "learner.steps=200" in got["overrides"]
        assert json.loads((run / "rl_from.json").read_text()) == {"source": str(src / "h3" / arm / "s0")}
    assert seen["react"]["overrides"][-1] == f"learner.sft.epochs={react_epochs}"
    runs = json.loads((tmp_path / "rl200" / "h3" / "paper_h3.json").read_text())["arms"]["memsearcher"]["runs"]
    assert runs[0]["learner"]["sft_steps"] == 30  # its SFT's steps, logged by the source
    # another SFT learning rate: the source's SFT would pass for one it did not train
    with pytest.raises(SystemExit, match="learner.sft.lr: 0.002 there, 0.001 here"):
        main([*argv, "--run-dir", str(tmp_path / "lr"), *small, "learner.sft.lr=0.001"])
    # a source without its SFT is named with what it lacks; --rl-from is not --run-dir
    shutil.rmtree(src / "h3" / "react" / "s0" / "sft" / "model")
    with pytest.raises(SystemExit, match=r"rl100/h3/react/s0 lacks sft/model/config.json: the run"):
        main([*argv, "--run-dir", str(tmp_path / "c"), *small])
    with pytest.raises(SystemExit, match="--rl-from .* is --run-dir"):
        main(["paper", "--hops", "3", "--run-dir", str(src), "--rl-from", str(src)])
