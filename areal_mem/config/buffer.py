"""The Arrow Flight replay buffer and its staleness bound."""

from dataclasses import dataclass


@dataclass
class BufferConfig:
    host: str = "127.0.0.1"
    port: int = 0
    url: str = ""  # a running buffer; empty: start one
    max_staleness: int = 2  # eta; 0 runs synchronously
    batch_groups: int = 8  # B: groups per training batch
    max_memory_groups: int = 256  # groups held in memory, the rest read back from disk
    max_group_mb: float = 256.0  # a put stream larger than this is refused (~6.3 bytes per context token)
    max_columns: int = 256  # columns of one put (11 context-row columns + trajectory info); more: refused
    # token ids of a put must lie in [0, vocab_size); 0: taken from <model.path>/config.json when
    # `areal-mem buffer serve` finds one, else unknown (ids only checked >= 0)
    vocab_size: int = 0
    # set_version moves the version forward by at most this much (a learner pushes +1; one resumed
    # from a checkpoint ahead of a buffer that lost its run dir jumps to the checkpoint's version)
    max_version_step: int = 1000
    token: str = ""  # shared bearer token; empty: env AREAL_MEM_BUFFER_TOKEN, else none
    max_running_groups: int = 0  # groups in flight, all workers; 0: rollout.num_workers * max_concurrent_groups
    fsync: bool = True  # an accepted group is fsynced to disk before the put returns
    slot_ttl_s: float = 3600.0  # a rollout slot not put/released by then is freed; 0: never
    # clients (rollout workers, learner) keep retrying an unreachable buffer this long, so a
    # buffer that the launcher restarts (same address, same run dir) loses them no call
    client_retry_window_s: float = 120.0
    # connections to the Flight port (pyarrow exposes no gRPC server option; conn_guard.py):
    # closed when no byte came within conn_first_byte_s, or no data moved for conn_idle_s (more
    # than any call's server-side wait), and past max_connections_per_address from one address
    conn_first_byte_s: float = 10.0
    conn_idle_s: float = 300.0
    max_connections_per_address: int = 256
