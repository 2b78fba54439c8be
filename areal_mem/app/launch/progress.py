"""The console progress bar of a training run, fed by the learner's `<run_dir>/metrics.jsonl`."""

from __future__ import annotations

import json
import os

from tqdm import tqdm

SHOWN = (("reward", "reward"), ("em", "EM"), ("staleness_mean", "stale"), ("step_s", "s/step"))


class ProgressBar:
    def __init__(self, run_dir: str, total_steps: int) -> None:
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.offset = 0
        self.dev = ""  # the newest dev EM beside training, "31.2@v12"
        self.bar = tqdm(total=total_steps, desc="RL", unit="step", dynamic_ncols=True)

    def update(self) -> None:
        """Read the lines the learner appended since the last call; show the newest step."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            lines = f.readlines()
        if lines and not lines[-1].endswith(b"\n"):
            lines.pop()  # a line still being written: read it next time
        self.offset += sum(len(line) for line in lines)
        for line in lines:
            row = json.loads(line)
            kind = row.get("kind", "train")
            if kind == "eval_dev" and row.get("em") is not None:  # the evaluation beside training
                self.dev = f"{row['em']:.3g}@v{row['step']}"  # (a workflow without EM shows none)
            if kind != "train":
                continue
            self.bar.n = int(row.get("step", self.bar.n))
            shown = {label: f"{row[k]:.3g}" for k, label in SHOWN if k in row}
            self.bar.set_postfix({**shown, **({"dev EM": self.dev} if self.dev else {})}, refresh=False)
        if lines:
            self.bar.refresh()

    def close(self) -> None:
        self.update()
        self.bar.close()
