"""Tool-call parsing and the search tool: every failure becomes response text."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from areal_mem.net import free_port
from areal_mem.rollout.tools.calls import find_tool_calls, tags_balanced
from areal_mem.rollout.tools.execute import execute_calls
from areal_mem.rollout.tools.wikipedia_search import WikipediaSearchTool


def test_parse_blocks_in_order():
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> and '
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>'
    )
    calls = find_tool_calls(text)
    assert [(c.name, c.arguments, c.error) for c in calls] == [("a", {"x": 1}, None), ("b", {}, None)]


def test_parse_errors():
    (c,) = find_tool_calls('<tool_call>{"name": "a"}</tool_call>')
    assert c.error == 'the tool call lacks an "arguments" object'
    (c,) = find_tool_calls('<tool_call>["a"]</tool_call>')
    assert c.error == "the tool call must be a JSON object"
    (c,) = find_tool_calls("<tool_call>__import__('os').system('x')</tool_call>")
    assert c.error.startswith("the tool call is not valid JSON")
    assert find_tool_calls("<tool_call><tool_call>{}</tool_call></tool_call>") == []


def test_tags_balanced():
    assert tags_balanced("<think>a</think><think>b</think>", "<think>", "</think>")
    assert not tags_balanced("</think><think>", "<think>", "</think>")
    assert not tags_balanced("<think><think></think></think>", "<think>", "</think>")
    assert not tags_balanced("<think>", "<think>", "</think>")


def _run_async(tool, *argument_sets, timeout_s=5.0):
    calls = [find_tool_calls(f"<tool_call>{a}</tool_call>")[0] for a in argument_sets]
    return execute_calls(calls, {tool.name: tool}, timeout_s)


def _run(tool, *argument_sets, timeout_s=5.0):
    return asyncio.run(_run_async(tool, *argument_sets, timeout_s=timeout_s))


def test_search_tool_formats_and_errors(retriever):
    tool = WikipediaSearchTool(retriever, separator="\\n")
    out = _run(
        tool,
        '{"name": "wikipedia_search", "arguments": {"query": "Noncis Krubra and The Crimson Mirror"}}',
        '{"name": "wikipedia_search", "arguments": {"query": "  "}}',
        '{"name": "wikipedia_search", "arguments": {"query": "x", "top_n": "3"}}',
        '{"name": "wikipedia_search", "arguments": {"query": "nothing here"}}',
        '{"name": "calculator", "arguments": {}}',
    )
    assert out[0] == (
        '"The Crimson Mirror"\nThe Crimson Mirror is a novel that appeared in 1849.\\n'
        '"Noncis Krubra"\nNoncis Krubra was born in Trequek.'
    )
    assert out[1] == 'Error: "query" must be a non-empty string.'
    assert out[2] == 'Error: "top_n" must be a positive integer.'
    assert out[3] == "No results."
    assert out[4] == "Error: unknown tool 'calculator'; available: wikipedia_search."


def test_backend_http_error_and_timeout(retriever):
    call = '{"name": "wikipedia_search", "arguments": {"query": "The Crimson Mirror"}}'
    retriever.fail = aiohttp.ClientConnectionError("refused")
    assert _run(WikipediaSearchTool(retriever), call) == [
        "Error: the wikipedia_search call failed (ClientConnectionError)."
    ]
    retriever.fail, retriever.delay_s = None, 1.0
    assert _run(WikipediaSearchTool(retriever), call, timeout_s=0.05) == [
        "Error: the wikipedia_search call timed out after 0.05 s."
    ]


def test_search_tool_over_real_retriever(retriever_url, world_dir):
    from areal_mem.retriever.client import RetrieverClient

    with open(f"{world_dir}/corpus.jsonl") as f:
        title = json.loads(f.readline())["contents"].split("\n")[0].strip('"')
    call = json.dumps({"name": "wikipedia_search", "arguments": {"query": title, "top_n": 3}})

    async def go(url):
        async with RetrieverClient(url, max_retries=0, timeout_s=5) as client:
            return await _run_async(WikipediaSearchTool(client), call)

    (found,) = asyncio.run(go(retriever_url))
    assert found.startswith(f'"{title}"\n') and found.count('\n"') == 2  # three documents
    (failed,) = asyncio.run(go(f"http://127.0.0.1:{free_port()}"))
    assert failed == "Error: the wikipedia_search call failed (RetrieverError)."
