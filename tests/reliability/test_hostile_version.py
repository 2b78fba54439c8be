"""A token holder moves the buffer's version ahead of the learner: the learner's next
`set_version` is refused, and the trainer says so and pushes again past it instead of stopping."""

from __future__ import annotations

from areal_mem.buffer.client import BufferClient
from areal_mem.buffer.server.service import BufferService
from areal_mem.config import RunConfig
from areal_mem.config.buffer import BufferConfig
from areal_mem.learner.trainer import Trainer
from tests.buffer.conftest import make_group


class _Engine:
    rank = 0


class _Pushes:
    """Records the versions the trainer pushes (the push itself is tested in tests/learner)."""

    def __init__(self) -> None:
        self.versions: list = []

    def publish(self, version: int) -> None:
        self.versions.append(version)


def test_the_trainer_survives_a_version_moved_by_another_caller(tmp_path, capsys):
    svc = BufferService(str(tmp_path / "buf"), BufferConfig(max_staleness=1, max_running_groups=8, fsync=False))
    client, hostile = BufferClient(svc.url), BufferClient(svc.url)
    try:
        pushes = _Pushes()
        trainer = Trainer(RunConfig(run_dir=str(tmp_path / "run")), _Engine(), pushes, buffer=client)
        trainer.state.version = 1
        assert trainer._tell_buffer() == 0 and client.stats().version == 1  # the honest path
        for i in range(6):
            client.put_group(make_group(f"g{i}", seed=i, start_version=1))
        assert hostile.set_version(1001)["dropped_stale"] == 6
        trainer.state.version = 2  # the learner pushed version 2; the buffer refuses it
        assert trainer._tell_buffer() == 0
        out = capsys.readouterr().out
        assert "[learner] the buffer refused version 2" in out and "another caller moved it to 1001" in out
        assert pushes.versions == [1002] and trainer.state.version == 1002
        assert client.stats().version == 1002
        assert client.put_group(make_group("next", start_version=1002)) is True  # rollouts go on
    finally:
        client.close()
        hostile.close()
        svc.shutdown()
