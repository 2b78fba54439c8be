"""Where an evaluated answer came from: the searches' injected text (loss mask 0) against the
golden and the predicted answers."""

from areal_mem.app.evaluation.runner import search_provenance
from areal_mem.data.task import Task
from areal_mem.trajectory import Context, Trajectory


def _traj(tokenizer, model_text, injected_text, answer):
    model = tokenizer.encode(model_text, add_special_tokens=False)
    tool = tokenizer.encode(injected_text, add_special_tokens=False)
    ids = [5, 6] + model + tool
    n = len(model) + len(tool)
    ctx = Context(ids, 2, [1] * len(model) + [0] * len(tool), [0.0] * n, [0] * len(model) + [-1] * len(tool))
    return Trajectory("t", [ctx], info={"answer": answer})


def test_search_provenance_reads_only_the_injected_text(tokenizer):
    task = Task("q", "What was the profession of Ana?", ["Poet"])
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    copied = _traj(tokenizer, "search Ana", "Ana was a poet in Vell.", "the poet")
    assert search_provenance(copied, task, decode) == {"golden_in_search": True, "answer_in_search": True}
    # the model wrote "poet" itself, the search did not return it: not copied, not found
    guessed = _traj(tokenizer, "Ana poet", "Ana was born in Vell.", "poet")
    assert search_provenance(guessed, task, decode) == {"golden_in_search": False, "answer_in_search": False}
    wrong = _traj(tokenizer, "search", "Ana was a poet in Vell.", "Vell")  # copied, but the wrong span
    assert search_provenance(wrong, task, decode) == {"golden_in_search": True, "answer_in_search": True}
    silent = _traj(tokenizer, "search", "Ana was a poet.", "")
    assert search_provenance(silent, task, decode) == {"golden_in_search": True, "answer_in_search": False}


def test_first_hop_is_a_passage_naming_the_bridge_other_than_its_own(tokenizer):
    """A bridge question's first hop finds the passage that links to the bridge entity; the bridge's
    own passage (titled with its name, the second hop) names it too but does not count."""
    task = Task("q", "In which country was Ana born?", ["Kest"], {"type": "bridge", "bridge": "Vell"})
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    call = '{"name": "wikipedia_search", "arguments": {"query": "%s"}}'
    first = f'<tool_response>{call % "Ana"}\n"Ana"\nAna was born in Vell.\n"Bo"\nBo is a poet.\n</tool_response>\n'
    second = f'<tool_response>{call % "Vell"}\n"Vell"\nVell is a city in Kest.\n</tool_response>\n'
    both = search_provenance(_traj(tokenizer, "search", first + second, "Kest"), task, decode)
    assert both == {"golden_in_search": True, "answer_in_search": True, "first_hop_in_search": True, "hops_found": 2}
    only_second = search_provenance(_traj(tokenizer, "search", second, "Kest"), task, decode)
    assert only_second == {
        "golden_in_search": True,
        "answer_in_search": True,
        "first_hop_in_search": False,
        "hops_found": 0,  # the second hop without the first is not a chain followed
    }
    only_first = search_provenance(_traj(tokenizer, "search", first, "Vell"), task, decode)
    assert only_first == {
        "golden_in_search": False,
        "answer_in_search": True,
        "first_hop_in_search": True,
        "hops_found": 1,
    }
    # the second search's call line names the bridge in its query: it is not a passage, and the
    # first response's last passage ("Bo") ends at its own closing tag, not in the next call
    unlinked = "<tool_response>" + call % "Ana" + '\n"Bo"\nBo is a poet.\n</tool_response>\n'
    asked = search_provenance(_traj(tokenizer, "search", unlinked + second, "Kest"), task, decode)
    assert asked == {"golden_in_search": True, "answer_in_search": True, "first_hop_in_search": False, "hops_found": 0}


def test_hops_found_follows_a_long_chain_link_by_link(tokenizer):
    """A 4-hop chain (Ana -> employer Orm -> founder Vell -> birth city Tor -> its country Kest):
    hop i + 1 is the passage of chain entity i (its title) naming the next; a homonym's passage,
    same title without the link, does not count, and the chain stops at the first hop missing."""
    chain = ["Orm", "Vell", "Tor"]
    task = Task(
        "q", "In which country was the founder of Ana's employer born?", ["Kest"], {"bridge": "Orm", "chain": chain}
    )
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731

    def response(*docs):
        call = '{"name": "wikipedia_search", "arguments": {"query": "x"}}'
        return "<tool_response>" + call + "".join(f'\n"{t}"\n{text}' for t, text in docs) + "\n</tool_response>\n"

    hops = [
        ("Ana", "Ana works for Orm."),
        ("Orm", "Orm was founded by Vell."),
        ("Vell", "Vell was born in Tor."),
        ("Tor", "Tor is a city in Kest."),
    ]

    def found(*docs):
        return search_provenance(_traj(tokenizer, "search", response(*docs), ""), task, decode)["hops_found"]

    assert found(*hops) == 4
    assert found(*hops[:3]) == 3
    assert found(hops[0], ("Orm", "Orm is a river."), hops[2], hops[3]) == 1  # a homonym Orm: the chain broke there
    assert found(*hops[1:]) == 0
