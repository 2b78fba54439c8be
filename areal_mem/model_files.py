"""Checks on model files before anything opens them: what is not a regular file, and a
`model.path` that holds no model.

A file that links to a device or a FIFO makes a reader hang or read forever (/dev/zero hashes
without end); one that links into /proc or /sys reads what the system says, not a model. Both
are refused by name before any read. A `model.path` that is not a model folder is refused by
key before any service starts (transformers would take a missing folder for a hub id and end
in a validation traceback).
"""

from __future__ import annotations

import os
import re
import stat
from typing import Optional

from .config import ConfigError

# what a hub id looks like ("org/name"); anything else must be a folder here
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
SYSTEM_DIRS = ("/proc/", "/sys/", "/dev/", "/etc/", "/boot/")
KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def not_a_regular_file(path: str) -> Optional[str]:
    """Why `path` must not be read as a file (a device, FIFO, socket, folder, a link to one or
    to nothing, or into the system folders); None when it is a regular file. Opens nothing."""
    real = os.path.realpath(path)
    link = f" (a link to {real})" if os.path.islink(path) else ""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"cannot be read{link}: {e.strerror}"
    if not stat.S_ISREG(mode):
        return f"is {KINDS.get(stat.S_IFMT(mode), 'not a regular file')}{link}"
    if real.startswith(SYSTEM_DIRS):
        return f"is a system file{link}"
    return None


def check_model_path(path: str, key: str = "model.path") -> None:
    """Refuse, naming `key`, a model folder that is not there or holds no config.json (a hub id,
    `org/name` that is no local path, is left to the loaders)."""
    if not path:
        raise ConfigError(f"key '{key}' is empty: set it to a model folder (areal-mem model import SOURCE --out DIR)")
    if not os.path.exists(path):
        if HUB_ID.fullmatch(path):
            return
        raise ConfigError(
            f"key '{key}' = {path!r}: no such folder; write a model there first "
            f"(areal-mem model import SOURCE --out {path}, or model.source / model.build in `areal-mem train`)"
        )
    config = os.path.join(path, "config.json")
    if not os.path.isdir(path):
        why: Optional[str] = "it is not a folder"
    elif not os.path.lexists(config):
        why = "it holds no config.json"
    else:
        bad = not_a_regular_file(config)
        why = bad and f"its config.json {bad}"
    if why:
        raise ConfigError(f"key '{key}' = {path!r}: not a model folder: {why}")
