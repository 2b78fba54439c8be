"""Commands that compose more than one service (`config`, `data`, `learner`, `rollout`)."""
