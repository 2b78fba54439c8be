"""Run in a subprocess by test_sglang_args.py: parse argv lines with SGLang 0.5.23's own parser.

argv[1]: a JSON list of argv lists (each without `python -m sglang.launch_server`). Prints one JSON
line per argv: the ServerArgs fields that the launcher sets, or {"error": ...} when SGLang's parser
refuses the line (argparse exits 2 with its message on stderr).

`triton` and `IPython`, which `sglang.srt.server_args` imports at module level but a CPU machine
cannot have (a CUDA compiler; notebook display helpers), are inert placeholder modules here; the
parser is SGLang's code, unmodified. The placeholders live in this process only.
"""

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import sys
import types

PLACEHOLDERS = {"triton", "IPython"}
FIELDS = ("model_path", "host", "port", "tp_size", "base_gpu_id", "api_key", "mem_fraction_static", "dtype")


class _Inert(types.ModuleType):
    """Every attribute is another placeholder; calling one with a function returns it (a decorator)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Inert(self.__name__)


class _Placeholders(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in PLACEHOLDERS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Inert(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def main() -> None:
    sys.meta_path.insert(0, _Placeholders())
    from sglang.srt.server_args import ServerArgs

    for argv in json.loads(sys.argv[1]):
        parser = argparse.ArgumentParser(prog="sglang.launch_server")
        ServerArgs.add_cli_args(parser)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv)
        except SystemExit:
            print(json.dumps({"error": err.getvalue().strip().splitlines()[-1]}))
            continue
        server_args = ServerArgs.from_cli_args(args)
        fields = FIELDS + tuple(json.loads(sys.argv[2]) if len(sys.argv) > 2 else ())  # argv[2]: more to report
        print(json.dumps({f: getattr(server_args, f) for f in fields}))


if __name__ == "__main__":
    main()
