"""`areal-mem train`'s evaluation line for a question-answering workflow and for a plugin's own
workflow, whose summary holds no EM or F1 (null), only its reward."""

from areal_mem.app.train import summary_line


def test_qa_and_plugin_summaries_both_print():
    qa = {"em": 55.93, "f1": 61.2, "reward": 0.6, "questions": 472, "mean_turns": 2.114}
    assert summary_line(qa) == "EM 55.93% F1 61.20% on 472 questions, 2.11 turns each"
    plugin = {"em": None, "f1": None, "reward": 0.25, "questions": 2, "mean_turns": 1.5}
    assert summary_line(plugin) == "reward 0.250 on 2 questions, 1.50 turns each"
