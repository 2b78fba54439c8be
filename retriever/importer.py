"""Import a faiss index built elsewhere (Search-R1's `e5_Flat.index` of wiki-18) with its corpus.

Nothing is copied and nothing large is loaded: the index file is hard-linked into the folder
(same filesystem) or referenced by absolute path, the corpus likewise, and the corpus gets an
`offsets.u64` file (the byte offset of each passage line, written while streaming it once) that
`OffsetDocStore` memory-maps to read passage i at query time. Row i of the index is line i of
the corpus (blank lines skipped, as every corpus reader here does); the `id` field is returned,
never used for lookup.

Two checks refuse an import that would answer nonsense silently:
- count: the index's `ntotal` must equal the corpus's passage count;
- self-retrieval: a sample of passages spread over the corpus, encoded with the given encoder,
  pooling, prefix and max length, must find their own row first with a cosine of at least
  `MIN_COSINE` to the stored vector. A wrong encoder, prefix or pooling still finds the own row
  first on most corpora (the neighbours are far), but not at cosine 1; the refusal retries
  the sample with the other prefix, pooling and max length and names the setting that fixes it
  (normalising the query cannot change a ranking by inner product, so that is not checked).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from typing import Callable, List, Optional, Tuple

import numpy as np

from areal_mem.config.retriever import Dtype, EncoderConfig, Pooling

from .corpus import CorpusError, is_gzip, parse_line
from .dense import FAISS_FILE, _describe, _faiss
from .docstore import OFFSETS, OffsetDocStore
from .manifest import MANIFEST, IndexMismatchError, Manifest

CORPUS_FILE = "corpus.jsonl"
HEADER_BYTES = 1 << 20  # the index file's checksum covers its first MiB (header and first vectors)
BLOCK = 16 << 20  # corpus bytes read per step while scanning
SAMPLE = 16
MIN_COSINE = 0.995  # re-encoded passage vs stored vector; fp16/bf16 builds stay above 0.999
MIN_SHARE = 0.9  # of the sample (HNSW is approximate: one miss in 16 is tolerated)
WHITESPACE = np.frombuffer(b" \t\r\n\x0b\x0c", np.uint8)
E5_PASSAGE, E5_QUERY = "passage: ", "query: "


def header_checksum(path: str) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read(HEADER_BYTES)).hexdigest()


def open_faiss(path: str):
    """The index with its vectors memory-mapped (Flat and HNSW storage): nothing large is read."""
    faiss = _faiss()
    try:
        return faiss.read_index(path, faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError as e:
        raise IndexMismatchError(f"{path}: not a faiss index faiss can read ({str(e).splitlines()[0][:200]})") from None


def describe_faiss(index) -> dict:
    faiss = _faiss()
    metric = {faiss.METRIC_INNER_PRODUCT: "inner_product", faiss.METRIC_L2: "l2"}.get(index.metric_type)
    factory = _describe(index)
    kind = "hnsw" if factory.startswith("HNSW") else "ivfpq" if factory.startswith("IVF") else "flat"
    return {
        "type": kind,
        "factory": factory,
        "class": type(index).__name__,
        "metric": metric or str(index.metric_type),
        "dim": int(index.d),
        "ntotal": int(index.ntotal),
    }


def scan_corpus(path: str, offsets_path: str, progress: Optional[Callable[[int], object]] = None) -> Tuple[str, int]:
    """Write the uint64 offset of every non-blank line of `path` to `offsets_path`, streaming.

    Returns (checksum, count) as `corpus_checksum` gives them: the sha256 of the bytes, the lines.
    Lines are found with numpy on 16 MiB blocks; a line whose first byte is white space is
    read again to see whether it is blank (rare in a jsonl corpus).
    """
    sha, count, pos, line_starts_here = hashlib.sha256(), 0, 0, True
    tmp = offsets_path + ".tmp"
    with open(path, "rb") as f, open(path, "rb") as peek, open(tmp, "wb") as out:
        while True:
            block = f.read(BLOCK)
            if not block:
                break
            sha.update(block)
            arr = np.frombuffer(block, np.uint8)
            starts = np.flatnonzero(arr == 10) + 1
            starts = starts[starts < len(arr)]
            if line_starts_here:
                starts = np.concatenate([[0], starts])
            line_starts_here = block.endswith(b"\n")
            blank = np.isin(arr[starts], WHITESPACE)
            for i in np.flatnonzero(blank):  # white space first: blank only if nothing else follows
                peek.seek(pos + int(starts[i]))
                blank[i] = not peek.readline().strip()
            lines = starts[~blank]
            _check_line_starts(path, arr, lines, pos, count)
            kept = (lines + pos).astype("<u8")
            kept.tofile(out)
            count += len(kept)
            pos += len(block)
            if progress is not None:
                progress(len(block))
    os.replace(tmp, offsets_path)
    return "sha256:" + sha.hexdigest(), count


def _check_line_starts(path: str, arr: np.ndarray, lines: np.ndarray, pos: int, count: int) -> None:
    """Every passage line begins with `{` (after white space): an offset that points elsewhere
    (a line cut in two, binary junk) is refused here, at its row, not at the query that reads it."""
    first = arr[lines]
    odd = np.flatnonzero(first != ord("{"))
    for i in odd:
        at = pos + int(lines[i])
        with open(path, "rb") as g:
            g.seek(at)
            if g.readline(4096).lstrip()[:1] != b"{":
                raise CorpusError(f"{path} row {count + int(i)} (byte {at}): a passage line must be a JSON object")


def _place(src: str, out_dir: str, name: str, reference: bool) -> Tuple[str, str]:
    """Hard-link `src` into `out_dir/name` when allowed, else reference it: (path to record, how).
    A symbolic link is resolved first: a hard link to a relative link would point nowhere from
    `out_dir` (it was reported "imported (hardlink)" and then refused at serve as gone)."""
    src = os.path.realpath(src)
    dst = os.path.join(out_dir, name)
    if os.path.lexists(dst):
        if os.path.samefile(dst, src):
            return name, "hardlink"
        os.remove(dst)  # a link or reference of an earlier import into this folder (never a copy of ours)
    if not reference:
        try:
            os.link(src, dst)
            return name, "hardlink"
        except OSError:  # another filesystem, or hard links not allowed: reference it
            pass
    return src, "reference"


def resolve(index_dir: str, recorded: str) -> str:
    return recorded if os.path.isabs(recorded) else os.path.join(index_dir, recorded)


@dataclasses.dataclass
class SelfRetrieval:
    """How a sample of passages, re-encoded, finds its own rows."""

    sampled: int
    matched: int  # own row first (or tied first) and cosine >= MIN_COSINE
    first: int  # own row first, whatever the cosine
    median_cosine: float
    min_cosine: float

    @property
    def ok(self) -> bool:
        return self.sampled > 0 and self.matched >= MIN_SHARE * self.sampled

    def summary(self) -> str:
        return (
            f"{self.matched}/{self.sampled} found their own row first at cosine >= {MIN_COSINE} "
            f"({self.first}/{self.sampled} first at all; cosine median {self.median_cosine:.4f}, "
            f"min {self.min_cosine:.4f})"
        )


def sample_rows(count: int, n: int = SAMPLE) -> List[int]:
    return sorted(set(np.linspace(0, count - 1, min(n, count)).round().astype(int).tolist()))


def self_retrieval(index, rows: List[int], texts: List[str], encoder) -> SelfRetrieval:
    q = encoder.encode_passages(texts)
    k = min(10, index.ntotal)
    scores, found = index.search(np.ascontiguousarray(q, dtype=np.float32), k)
    matched = first = 0
    cosines = []
    for i, row in enumerate(rows):
        stored = index.reconstruct(int(row))
        cos = float(q[i] @ stored / max(np.linalg.norm(q[i]) * np.linalg.norm(stored), 1e-12))
        cosines.append(cos)
        own = [j for j in range(k) if found[i, j] == row]
        # own row first, or tied with the first (a duplicate passage elsewhere in the corpus)
        is_first = bool(own) and bool(scores[i, own[0]] >= scores[i, 0] - 1e-5)
        first += int(is_first)
        matched += int(is_first and cos >= MIN_COSINE)
    return SelfRetrieval(len(rows), matched, first, float(np.median(cosines)), float(min(cosines)))


def _alternatives(cfg: EncoderConfig) -> List[Tuple[str, EncoderConfig]]:
    """Settings that differ from `cfg` in one way users get wrong, each with its name."""
    other_prefix = "" if cfg.passage_prefix else E5_PASSAGE
    other_pool = Pooling.cls if Pooling(cfg.pooling) == Pooling.mean else Pooling.mean
    other_len = 512 if cfg.max_length != 512 else 256
    return [
        (f"--passage-prefix {other_prefix!r}", dataclasses.replace(cfg, passage_prefix=other_prefix)),
        (f"--pooling {other_pool.value}", dataclasses.replace(cfg, pooling=other_pool)),
        (
            f"--passage-prefix {other_prefix!r} --pooling {other_pool.value}",
            dataclasses.replace(cfg, passage_prefix=other_prefix, pooling=other_pool),
        ),
        (f"--max-length {other_len}", dataclasses.replace(cfg, max_length=other_len)),
    ]


def _describe_encoder(cfg: EncoderConfig, path: str) -> str:
    return (
        f"encoder {path}, pooling {Pooling(cfg.pooling).value}, passage prefix {cfg.passage_prefix!r}, "
        f"max length {cfg.max_length}, normalize {cfg.normalize}"
    )


def import_index(
    faiss_path: str,
    corpus_path: str,
    out_dir: str,
    encoder_cfg: EncoderConfig,
    reference: bool = False,
    sample: int = SAMPLE,
    show_progress: bool = True,
    log: Callable[[str], object] = print,
    max_passage_bytes: int = 1 << 20,
) -> Manifest:
    """Check and import; writes `offsets.u64`, the links (or references) and `manifest.json` last.

    Raises `IndexMismatchError` (count, dimension, metric, self-retrieval) or `CorpusError`.
    """
    from tqdm import tqdm

    start = time.perf_counter()
    index, info = _open_checked(faiss_path, corpus_path)
    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    if os.path.exists(manifest_path):
        os.remove(manifest_path)

    size = os.path.getsize(corpus_path)
    bar = tqdm(desc="scan corpus", total=size, unit="B", unit_scale=True, disable=not show_progress)
    try:
        checksum, count = scan_corpus(corpus_path, os.path.join(out_dir, OFFSETS), bar.update)
    finally:
        bar.close()
    if count != info["ntotal"]:
        raise IndexMismatchError(
            f"count mismatch: {faiss_path} holds {info['ntotal']} vectors but {corpus_path} has {count} "
            f"passages (non-blank lines); row i of the index must be line i of the corpus it was built from"
        )
    if count == 0:
        raise IndexMismatchError(f"{corpus_path}: empty corpus, nothing to import")
    docs = OffsetDocStore(corpus_path, os.path.join(out_dir, OFFSETS))
    try:
        check_passage_length(docs, max_passage_bytes)
    finally:
        docs.close()

    encoder, check_cfg, rows, result = _check_encoder(
        index, info, faiss_path, corpus_path, out_dir, count, encoder_cfg, sample, log
    )

    index_file, index_how = _place(faiss_path, out_dir, FAISS_FILE, reference)
    corpus_file, corpus_how = _place(corpus_path, out_dir, CORPUS_FILE, reference)
    identity = encoder.identity()
    identity["dtype"] = Dtype(encoder_cfg.dtype).value
    manifest = Manifest(
        kind="dense",
        count=count,
        corpus_path=os.path.abspath(corpus_path),
        corpus_checksum=checksum,
        split_title=False,
        dim=encoder.dim,
        encoder=identity,
        index={k: info[k] for k in ("type", "factory", "metric", "ntotal")},
        build_seconds=round(time.perf_counter() - start, 3),
        docstore="offsets",
        imported=_imported(
            faiss_path,
            corpus_path,
            index_file,
            index_how,
            corpus_file,
            corpus_how,
            info,
            size,
            count,
            checksum,
            rows,
            result,
        ),
    )
    manifest.save(out_dir)
    return manifest


def _open_checked(faiss_path: str, corpus_path: str):
    """The faiss index and its description, once both files are there, the corpus is plain
    jsonl (read by byte offset) and the index ranks by inner product."""
    for what, path in (("index", faiss_path), ("corpus", corpus_path)):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such {what} file")
    if is_gzip(corpus_path):
        raise CorpusError(
            f"{corpus_path} is gzip-compressed; an imported corpus is read by byte offset, so it must be "
            f"the plain jsonl: gunzip it first (wiki-18.jsonl is about 14 GB)"
        )
    index = open_faiss(faiss_path)
    info = describe_faiss(index)
    if info["metric"] != "inner_product":
        raise IndexMismatchError(
            f"{faiss_path}: metric {info['metric']}; the service ranks by inner product "
            f"(Search-R1 builds with faiss.METRIC_INNER_PRODUCT)"
        )
    return index, info


def _check_encoder(
    index,
    info,
    faiss_path: str,
    corpus_path: str,
    out_dir: str,
    count: int,
    encoder_cfg: EncoderConfig,
    sample: int,
    log,
):
    """The encoder the service will embed queries with, checked against the index: its dimension,
    then self-retrieval of sampled passages (a wrong encoder, prefix or pooling fails it)."""
    from .encoder import Encoder

    check_cfg = dataclasses.replace(encoder_cfg, dtype=Dtype.float32)  # the check compares at full precision
    encoder = Encoder(check_cfg)
    if encoder.dim != info["dim"]:
        raise IndexMismatchError(
            f"dimension mismatch: {faiss_path} holds {info['dim']}-dimensional vectors, encoder {encoder.path} "
            f"gives {encoder.dim}: the index was built with another encoder (Search-R1's e5_Flat.index: "
            f"intfloat/e5-base-v2, 768)"
        )
    docs = OffsetDocStore(corpus_path, os.path.join(out_dir, OFFSETS))
    try:
        rows = sample_rows(count, sample)
        passages = [parse_line(docs.line(r), f"{corpus_path} row {r}") for r in rows]
    finally:
        docs.close()
    texts = [p.contents for p in passages]
    result = self_retrieval(index, rows, texts, encoder)
    described = _describe_encoder(check_cfg, encoder.path)
    log(f"self-retrieval: {result.summary()} with {described}")
    if not result.ok:
        raise IndexMismatchError(_refusal(faiss_path, index, rows, texts, check_cfg, encoder, result, described))
    if encoder_cfg.passage_prefix == E5_PASSAGE and encoder_cfg.query_prefix != E5_QUERY:
        log(
            f"note: passages were encoded with {E5_PASSAGE!r} but the query prefix is "
            f"{encoder_cfg.query_prefix!r}; e5 expects {E5_QUERY!r} (the index cannot check the query side)"
        )
    return encoder, check_cfg, rows, result


def _imported(
    faiss_path, corpus_path, index_file, index_how, corpus_file, corpus_how, info, size, count, checksum, rows, result
) -> dict:
    """The manifest's record of an import: where each file came from and how it was placed, its
    size and mtime (serving refuses a file changed since), and the self-retrieval check."""
    return {
        "index": {
            "source": os.path.abspath(faiss_path),
            "file": index_file,
            "linked": index_how,
            "size": os.path.getsize(faiss_path),
            "mtime_ns": os.stat(faiss_path).st_mtime_ns,
            "header_sha256": header_checksum(faiss_path),
            **info,
        },
        "corpus": {
            "source": os.path.abspath(corpus_path),
            "file": corpus_file,
            "linked": corpus_how,
            "size": size,
            "mtime_ns": os.stat(corpus_path).st_mtime_ns,
            "lines": count,
            "checksum": checksum,
        },
        "offsets": OFFSETS,
        "check": {**dataclasses.asdict(result), "rows": rows, "min_cosine_required": MIN_COSINE},
    }


def _refusal(faiss_path, index, rows, texts, cfg: EncoderConfig, encoder, result, described) -> str:
    lines = [
        f"self-retrieval check failed for {faiss_path}: of {result.sampled} sampled passages encoded with "
        f"{described}, {result.summary()}."
    ]
    fixes = []
    for name, alt in _alternatives(cfg):
        r = self_retrieval(index, rows, texts, encoder.with_settings(alt))
        lines.append(f"  with {name}: {r.summary()}")
        if r.ok:
            fixes.append(name)
    if fixes:
        lines.append(f"The index was likely built with {fixes[0]}: import again with it.")
    else:
        lines.append(
            "No other prefix, pooling or max length fixes it: the index was likely built with another "
            "encoder (Search-R1's e5_Flat.index: --encoder intfloat/e5-base-v2 --pooling mean "
            "--passage-prefix 'passage: ' --query-prefix 'query: ' --max-length 256), or from another corpus."
        )
    return "\n".join(lines)


def check_passage_length(docs, max_bytes: int) -> None:
    """Refuse a docstore whose longest passage is over `max_bytes` (retriever.max_passage_bytes),
    from its offsets alone: one 100 MB passage made every search that found it a 102 MB answer."""
    row, n = docs.longest()
    if n > max_bytes:
        where = getattr(docs, "path", "the index's docs.arrow")
        raise IndexMismatchError(
            f"{where} row {row}: a passage of {n} bytes, over retriever.max_passage_bytes = {max_bytes}; split "
            f"or drop it, or raise the limit"
        )


def check_imported(index_dir: str, manifest: Manifest) -> Tuple[str, str]:
    """Before serving an imported index: its files are there, the same size, the index's header
    unchanged. Returns (faiss file, corpus file). Hashing them whole would take minutes."""
    rec = manifest.imported
    paths = []
    for part in ("index", "corpus"):
        path = resolve(index_dir, rec[part]["file"])
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{index_dir}: the imported {part} file {path} is gone (imported from {rec[part]['source']}); "
                f"import again"
            )
        st = os.stat(path)
        if st.st_size != rec[part]["size"]:
            raise IndexMismatchError(
                f"{path}: {st.st_size} bytes, but the import recorded {rec[part]['size']}: the {part} file changed "
                f"since `areal-mem retriever import`; import again"
            )
        # an import before mtimes were recorded has none: its size and header are all there is
        if rec[part].get("mtime_ns", st.st_mtime_ns) != st.st_mtime_ns:
            raise IndexMismatchError(
                f"{path}: modified since `areal-mem retriever import` (mtime {st.st_mtime_ns} ns, recorded "
                f"{rec[part]['mtime_ns']} ns; the same size, so rewritten in place): import again"
            )
        paths.append(path)
    header = header_checksum(paths[0])
    if header != rec["index"]["header_sha256"]:
        raise IndexMismatchError(f"{paths[0]}: its first MiB changed since the import ({header}); import again")
    return paths[0], paths[1]
