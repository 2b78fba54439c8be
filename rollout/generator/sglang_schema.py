"""SGLang's published JSON contract, loaded without importing (or needing) SGLang itself.

The sglang wheel ships `sglang/api/v1/api_types.py`, generated msgspec structs with
`from_json_value` decoders that raise `JsonContractError` exactly where SGLang's server would
answer 400. Installed with `pip install --no-deps sglang==0.5.23`, the file is loaded by path
so none of sglang's GPU dependencies are needed; tests use it to check real traffic.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

INSTALL_HINT = "pip install --no-deps sglang==0.5.23 msgspec"
_MODULE_NAME = "sglang_api_v1_types"


def load_sglang_api_types() -> ModuleType:
    """The `api_types` module of the installed sglang wheel; ImportError (with the fix) if absent."""
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"sglang is not installed; {INSTALL_HINT}")
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "api", "v1", "api_types.py")
        if os.path.exists(path):
            break
    else:
        raise ImportError(
            f"sglang/api/v1/api_types.py not found under {list(spec.submodule_search_locations)}; {INSTALL_HINT}"
        )
    mod_spec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"{path}: not loadable as a Python module; {INSTALL_HINT}")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[_MODULE_NAME] = module  # msgspec resolves the structs' forward references through it
    mod_spec.loader.exec_module(module)
    return module
