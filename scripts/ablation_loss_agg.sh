#!/usr/bin/env bash
# The learner.loss_agg ablation of docs/learner.md: the debug recipe's RL stage (100 steps) with
# token_mean, trajectory_mean and context_mean, for RL seeds 0 1 2, from one SFT start (seed 0).
#   bash scripts/ablation_loss_agg.sh OUT [SEEDS] [MODES]
# OUT/start holds the start (world, index, SFT model with 1 thread, robust to other load; built
# once, ~25 min), OUT/<mode>-s<seed> each run (skipped when its train_summary.json exists),
# OUT/ablation.md the table.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/ablation_loss_agg.sh OUT [SEEDS] [MODES]}
SEEDS=${2:-0 1 2}
MODES=${3:-token_mean trajectory_mean context_mean}
PY=.venv/bin/python
# the recipe as the ablation of docs/learner.md ran it (2026-12-04): 10 SFT epochs of 8 random rows, 100 RL
# steps, the tokenizer without the workflow's text as whole words, vocabulary 2048, the world of 4000 passages
AS_RAN=(learner.sft.epochs=10 learner.sft.batch_tokens=0 learner.sft.batch_rows=8 model.init.workflow_text_repeats=0
        model.init.vocab_size=2048 world.passages=4000 world.questions=5000)
$PY -c "from benchmarks.harness.arms import prepare_start; prepare_start('configs/debug_cpu.yaml', ['learner.sft.threads=1', *'${AS_RAN[*]}'.split()], '$OUT/start', sft=True)"
START=(world.dir="$OUT/start/world" world.build=false retriever.index_dir="$OUT/start/index" model.path="$OUT/start/sft/model"
       learner.sft.warm_start=false)
# the dev and train curves beside training (docs/eval_beside_training.md): where each run diverges
EVAL=(eval.interval=25 eval.dev_questions=32 eval.train_questions=32)
for seed in $SEEDS; do
  for mode in $MODES; do
    run="$OUT/$mode-s$seed"
    [ -f "$run/train_summary.json" ] && continue
    # every arm starts from the same model: its start evaluation is computed once and shared
    if [ -d "$OUT/eval_start" ] && [ ! -e "$run/eval/start" ]; then
      mkdir -p "$run/eval" && cp -r "$OUT/eval_start" "$run/eval/start"
    fi
    .venv/bin/areal-mem train --config configs/debug_cpu.yaml run_dir="$run" seed="$seed" \
      learner.loss_agg="$mode" learner.steps=100 "${START[@]}" "${EVAL[@]}"
    [ -d "$OUT/eval_start" ] || cp -r "$run/eval/start" "$OUT/eval_start"
  done
done
$PY - "$OUT" <<'EOF'
import json, os, sys
from benchmarks.harness.paired import fixed_broken, read_results
out = sys.argv[1]
rows = []
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "train_summary.json")
    if not os.path.exists(path):
        continue
    s = json.load(open(path))
    ev = os.path.join(out, name, "eval")
    fixed, broken = fixed_broken(*(read_results(os.path.join(ev, t, "results.jsonl")) for t in ("start", "final")))
    mode, seed = name.rsplit("-s", 1)
    curve = s.get("eval_during") or [{}]
    dev = " / ".join(f"{c['em']:.0f}" for c in curve if "em" in c)
    train = " / ".join(f"{c['train_em']:.0f}" for c in curve if "train_em" in c)
    rows.append((mode, seed, s["eval_start"]["em"], s["eval_final"]["em"], fixed, broken, s["stage_s"]["rl"], dev, train))
lines = [
    "| loss_agg | RL seed | test EM after SFT | test EM after RL | fixed | broken | RL s | dev EM by version | train EM by version |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]
lines += [f"| {m} | {s} | {a:.2f}% | {b:.2f}% | {f} | {k} | {t:.0f} | {d} | {tr} |" for m, s, a, b, f, k, t, d, tr in rows]
open(os.path.join(out, "ablation.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
