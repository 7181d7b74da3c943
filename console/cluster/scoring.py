"""`campaign score PLAN --cluster ...`: one scorer replica per GPU actor, items sharded across them
(docs/cluster.md).

`ShardedScorer` stands in for a local scorer inside stats/quality/scoring.py score_expected: it
keeps the local scorer's identity (scorer id, version, model hash: what the rows record) and its
`batch_size` is the replicas' batch size times their number, so every call carries exactly the
consecutive batches the local path would score one after another; each goes, whole, to one
replica. A replica thus scores the same items in the same batches as the local path, which is
why the stored results are identical (on the same kind of device). The console process still
writes every row. Output audio and prompt bytes travel with the items, so a node needs neither
the console's artifacts folder nor the workload; it needs the scorer's model folder, checked by
its model hash against the console's.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from console.cluster.connect import ClusterError

REPLICA_CPUS = 1


class ScorerReplica:
    """A scorer loaded on the GPU a Ray actor reserved (made an actor by `replica_actor`)."""

    def __init__(self, name: str, model_paths: dict, dtypes: dict, device: str | None, batch_size: int | None):
        from stats.quality.registry import make_scorer

        self.scorer = make_scorer(name, model_paths, dtypes=dtypes, device=device, batch_size=batch_size)
        self.scratch = Path(tempfile.mkdtemp(prefix="campaign-score-"))

    def load(self) -> dict[str, Any]:
        ok, why = self.scorer.available()
        if not ok:
            return {"ok": False, "why": why}
        self.scorer.ensure_loaded()
        return {"ok": True, "model_hash": self.scorer.model_hash, "device": self.scorer.device}

    def score(self, items: list[Any], blobs: dict[str, bytes]) -> list[Any]:
        """Score items whose files arrived as bytes (keyed by the console's path)."""
        local = []
        for item in items:
            audio = self._file(str(item.audio_path), blobs)
            prompt = self._file(str(item.prompt_wav), blobs) if item.prompt_wav else None
            local.append(replace(item, audio_path=audio, prompt_wav=prompt))
        return self.scorer.score_batch(local)

    def _file(self, key: str, blobs: dict[str, bytes]) -> Path:
        path = self.scratch / f"{abs(hash(key)):x}-{Path(key).name}"
        if not path.exists():
            path.write_bytes(blobs[key])
        return path

    def close(self) -> None:
        import shutil

        self.scorer.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def replica_actor(ray: Any) -> Any:
    """The replica's actor class. Its process gets the console's torch thread count: a CPU scorer's
    float32 reductions run in an order that depends on it, and Ray gives a one-CPU actor a single
    OpenMP thread, so without it the replicas' scores differed from the local path's in the last
    bits (docs/cluster.md)."""
    threads = _torch_threads()
    env = {"env_vars": {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}} if threads else None
    return ray.remote(num_gpus=1, num_cpus=REPLICA_CPUS, max_restarts=0, runtime_env=env)(ScorerReplica)


def _torch_threads() -> int | None:
    """This process's torch thread count, or None without torch (nothing to match)."""
    try:
        import torch
    except ImportError:
        return None
    return int(torch.get_num_threads())


def _blobs(items: Sequence[Any]) -> dict[str, bytes]:
    out = {}
    for item in items:
        for p in (item.audio_path, item.prompt_wav):
            if p is not None and str(p) not in out:
                out[str(p)] = Path(p).read_bytes()
    return out


class ShardedScorer:
    """A local scorer's stand-in whose batches are scored by replicas; see the module docstring."""

    def __init__(self, local: Any, ray: Any, replicas: int, *, model_paths: dict, dtypes: dict,
                 device: str | None):
        self.local, self.ray, self.replicas = local, ray, replicas
        self._args = (local.name, model_paths, dtypes, device, local.batch_size)
        self.actors: list[Any] = []  # created when scoring starts, killed by close(): the next scorer needs the GPUs
        self.batch_size = local.batch_size * replicas
        self._loaded = False

    def __getattr__(self, name: str) -> Any:  # identity and availability: the local scorer's
        return getattr(self.local, name)

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        cls = replica_actor(self.ray)
        self.actors = [cls.remote(*self._args) for _ in range(self.replicas)]
        for i, got in enumerate(self.ray.get([a.load.remote() for a in self.actors])):
            if not got["ok"]:
                raise ClusterError(f"scorer {self.local.name}: replica {i}: unavailable: {got['why']}")
            if got["model_hash"] != self.local.model_hash:
                raise ClusterError(f"scorer {self.local.name}: replica {i} has model hash {got['model_hash'][:12]}, "
                                   f"this host {self.local.model_hash[:12]}: the nodes must hold the same model folder")
        self._loaded = True

    def submit_batch(self, items: Sequence[Any]) -> Callable[[], list[Any]]:
        """Send consecutive slices of the replicas' batch size, one per replica, now; collect
        their results, in order, when the returned function is called (Scorer.submit_batch)."""
        self.ensure_loaded()
        step = self.local.batch_size
        chunks = [list(items[i:i + step]) for i in range(0, len(items), step)]
        refs = [self.actors[k % len(self.actors)].score.remote(chunk, _blobs(chunk)) for k, chunk in enumerate(chunks)]

        def finish() -> list[Any]:
            out: list[Any] = []
            for got in self.ray.get(refs):
                out += got
            return out
        return finish

    def score_batch(self, items: Sequence[Any]) -> list[Any]:
        return self.submit_batch(items)()

    def describe(self) -> dict:
        return {**self.local.describe(), "replicas": self.replicas}

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.get(a.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - the replica may be gone; it is killed below anyway
                pass
            self.ray.kill(a)
        self.actors, self._loaded = [], False
        self.local.close()


def cluster_wrapper(address: str, plan: Any, device: str | None):
    """(wrap(scorer) -> ShardedScorer, replicas): one replica per GPU of the cluster."""
    from console.cluster.connect import connect
    from console.cluster.shape import probe

    ray = connect(address)
    shape = probe(ray)
    if shape.gpus == 0:
        raise ClusterError(f"--cluster {address}: the Ray cluster offers no GPUs (a scorer replica reserves one)")
    paths, dtypes = dict(plan.quality.model_paths), dict(plan.quality.dtypes)

    def wrap(scorer: Any) -> ShardedScorer:
        return ShardedScorer(scorer, ray, shape.gpus, model_paths=paths, dtypes=dtypes, device=device)

    return wrap, shape.gpus
