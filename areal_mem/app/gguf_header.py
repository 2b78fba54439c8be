"""A bounded read of a GGUF header, before the gguf package or transformers touch the file.

`GGUFReader` trusts the header: a 150-byte file that declares a 2^40-element array, 2^62
tensors or a 2^63-byte string makes it allocate or map what the file does not hold, and a
truncated file or a non-UTF-8 name ends in a traceback. Here every count and length is checked
against the bytes that are left before it is used, the header against a size limit, every
tensor's data against the end of the file, and strings are decoded as UTF-8; a refusal names
the key or tensor and the byte offset. The scan reads the header once (at most the limit).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

# value types (gguf's GGUFValueType): struct format of the scalar ones
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
MAX_DIMS = 8
ALIGNMENT = 32  # GGUF's default data alignment (`general.alignment` may change it)


class GGUFRefused(ValueError):
    """The header cannot be read safely; the message names the file, key or tensor and offset."""


@dataclass
class GGUFHeader:
    """What the import needs from the header: scalar and string metadata, tensor shapes."""

    version: int
    metadata: Dict[str, Any] = field(default_factory=dict)  # arrays as their length only
    tensors: List[Tuple[str, List[int], int]] = field(default_factory=list)  # name, shape, ggml type
    offsets: Dict[str, int] = field(default_factory=dict)  # tensor name -> offset in the data
    data_start: int = 0  # where the tensor data begins in the file

    def elements(self) -> int:
        total = 0
        for _, shape, _ in self.tensors:
            n = 1
            for d in shape:
                n *= d
            total += n
        return total


class _Cursor:
    def __init__(self, data: bytes, file_size: int, limit: int, name: str) -> None:
        self.data, self.pos, self.file_size, self.limit, self.name = memoryview(data), 0, file_size, limit, name

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > self.file_size:
            raise GGUFRefused(f"{self.name}: truncated GGUF: {what} at byte {self.pos} needs {n} bytes, the file ends")
        if self.pos + n > len(self.data):
            raise GGUFRefused(
                f"{self.name}: GGUF header larger than {self.limit >> 20} MiB ({what} at byte {self.pos}); "
                f"raise --max-header-mb if the file is genuine"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, each: int) -> int:
        """A u64 count of items of at least `each` bytes, checked against the bytes left."""
        n = self.scalar("Q", what)
        if n * each > self.file_size - self.pos:
            raise GGUFRefused(
                f"{self.name}: {what} declares {n} items at byte {self.pos - 8}; the file has "
                f"{self.file_size - self.pos} bytes left"
            )
        return n

    def string(self, what: str) -> str:
        raw = bytes(self.take(self.count(what, 1), what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFRefused(f"{self.name}: {what} at byte {self.pos - len(raw)} is not UTF-8 ({e.reason})") from None


def _value(cur: _Cursor, vtype: int, key: str) -> Any:
    if vtype in SCALARS:
        return cur.scalar(SCALARS[vtype], f"value of {key!r}")
    if vtype == STRING:
        return cur.string(f"value of {key!r}")
    if vtype != ARRAY:
        raise GGUFRefused(f"{cur.name}: key {key!r} has unknown value type {vtype} at byte {cur.pos - 4}")
    etype = cur.scalar("I", f"array type of {key!r}")
    if etype in SCALARS:
        size = struct.calcsize(SCALARS[etype])
        n = cur.count(f"array {key!r}", size)
        cur.take(n * size, f"array {key!r}")
    elif etype == STRING:
        n = cur.count(f"array {key!r}", 8)
        for i in range(n):
            cur.take(cur.count(f"{key}[{i}]", 1), f"{key}[{i}]")
    else:
        raise GGUFRefused(f"{cur.name}: array {key!r} has element type {etype} (nested or unknown)")
    return n


def read_header(path: str, max_header_bytes: int) -> GGUFHeader:
    """The checked header of the GGUF file at `path` (GGUFRefused for anything unsafe)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(0)
        data = f.read(min(size, max_header_bytes))
    cur = _Cursor(data, size, max_header_bytes, path)
    if bytes(cur.take(4, "the magic")) != b"GGUF":
        raise GGUFRefused(f"{path}: not a GGUF file (no GGUF magic)")
    header = GGUFHeader(cur.scalar("I", "the version"))
    if header.version not in (2, 3):
        raise GGUFRefused(f"{path}: GGUF version {header.version} (this reads 2 and 3)")
    n_tensors = cur.count("the tensor count", 8 + 4 + 8 + 4 + 8)  # the smallest tensor record
    n_kv = cur.count("the metadata count", 8 + 4 + 1)
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        header.metadata[key] = _value(cur, cur.scalar("I", f"type of {key!r}"), key)
    offsets: List[int] = []
    for _ in range(n_tensors):
        name = cur.string("a tensor name")
        dims = cur.scalar("I", f"dimensions of tensor {name!r}")
        if not 1 <= dims <= MAX_DIMS:
            raise GGUFRefused(f"{path}: tensor {name!r} has {dims} dimensions (1..{MAX_DIMS})")
        shape = [cur.scalar("Q", f"shape of tensor {name!r}") for _ in range(dims)]
        ttype = cur.scalar("I", f"type of tensor {name!r}")
        offsets.append(cur.scalar("Q", f"offset of tensor {name!r}"))
        header.tensors.append((name, shape, ttype))
    align = header.metadata.get("general.alignment", ALIGNMENT)
    if not isinstance(align, int) or not 1 <= align <= 1 << 20:
        raise GGUFRefused(f"{path}: general.alignment {align!r} is not in 1..{1 << 20}")
    start = header.data_start = -(-cur.pos // align) * align  # tensor data begins here
    header.offsets = {name: off for (name, _, _), off in zip(header.tensors, offsets)}
    for (name, shape, ttype), offset in zip(header.tensors, offsets):
        try:
            block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise GGUFRefused(f"{path}: tensor {name!r} has unknown type {ttype}") from None
        elements = 1
        for d in shape:
            elements *= d
        if start + offset + -(-elements // block) * nbytes > size:
            raise GGUFRefused(
                f"{path}: tensor {name!r} {shape} ({GGMLQuantizationType(ttype).name}) at data offset {offset} "
                f"runs past the end of the file ({size} bytes): truncated or corrupt"
            )
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise GGUFRefused(f"{path}: the GGUF header has no general.architecture string")
    return header
