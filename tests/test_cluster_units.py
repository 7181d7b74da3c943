"""Pure parts of the cluster path (no Ray): pair groups, placement, ports, cluster shape, and the
throughput rules' treatment of pairs across GPU models and GPUs (docs/cluster.md)."""

from __future__ import annotations

from types import SimpleNamespace

from console.cluster.groups import pair_groups
from console.cluster.recorder import run_placement
from console.cluster.shape import ClusterShape, NodeShape, node_shape, shape_problem
from console.runner import Cell
from engine_adapters.placement import assigned_gpu, slot_port, with_port
from stats.gates import INCONCLUSIVE, PASS
from stats.throughput_rules import RepeatValue, evaluate_cell

GPUS = [{"gpu_index": 0, "name": "NVIDIA H200", "uuid": "GPU-aaa"}, {"gpu_index": 1, "name": "NVIDIA H200", "uuid": "GPU-bbb"}]


def test_pair_groups_keep_compared_runs_together_in_plan_order():
    cells = [Cell(e, c, "measured", r, "tuning") for e in ("a", "b") for c in (1, 2) for r in (0, 1)]  # sequential
    groups = pair_groups(cells)
    assert [[x.key for x in g] for g in groups][:2] == [["a/c1/measured/0", "b/c1/measured/0"],
                                                        ["a/c1/measured/1", "b/c1/measured/1"]]
    assert len(groups) == 4 and all([x.engine for x in g] == ["a", "b"] for g in groups)


def test_the_assigned_gpu_follows_cuda_visible_devices_by_index_or_uuid():
    assert assigned_gpu(GPUS, ["1"])["uuid"] == "GPU-bbb"
    assert assigned_gpu(GPUS, ["GPU-aaa"])["gpu_index"] == 0
    assert assigned_gpu(GPUS, [])["uuid"] == "GPU-aaa"
    assert assigned_gpu([], ["0"]) is None and assigned_gpu(GPUS, ["7"]) is None


def test_slot_ports_rewrite_only_the_port_argument():
    assert slot_port(8091, 0) == 8091 and slot_port(8091, 2) == 8291
    argv = ["serve", "--port", "8091", "--other", "8091", "--port=8091"]
    assert with_port(argv, 8091, 8191) == ["serve", "--port", "8191", "--other", "8091", "--port=8191"]


def test_placement_without_nvml_names_the_gpu_by_the_shape():
    shape = ClusterShape((NodeShape("n" * 20, "10.0.0.1", 2, ("Fake", "Fake"), False),))
    got = run_placement({"node_id": "n" * 20, "slot": 1, "gpu": None}, shape)
    assert got == {"node_id": "n" * 20, "gpu_uuid": "ray-gpu:nnnnnnnnnnnn/1", "gpu_name": "Fake"}
    real = run_placement({"node_id": "x", "slot": 0, "gpu": GPUS[1]}, shape)
    assert real["gpu_uuid"] == "GPU-bbb" and real["gpu_name"] == "NVIDIA H200"


def _plan(gpu_name=None, gpus=None, expected=None):
    return SimpleNamespace(hash="ab" * 32, cluster=SimpleNamespace(gpu_name=gpu_name, gpus=gpus),
                           gpu=SimpleNamespace(expected_name=expected))


def test_shape_problems_are_one_line_naming_the_field_and_what_was_found():
    node = node_shape({"NodeID": "n1", "NodeManagerAddress": "h", "Resources": {"GPU": 2.0}}, GPUS)
    shape = ClusterShape((node,))
    assert shape.describe() == "NVIDIA H200 x 2 on 1 node(s)"
    assert shape_problem(_plan("NVIDIA H200", 2), shape) is None
    assert shape_problem(_plan(), shape) is None
    assert shape_problem(_plan(gpus=8), shape) == \
        "plan abababababab: cluster.gpus: expected 8 GPU(s), the cluster has NVIDIA H200 x 2 on 1 node(s)"
    assert "expected every GPU to be 'NVIDIA A100'" in shape_problem(_plan("NVIDIA A100"), shape)
    assert "gpu.expected_name: expected every GPU to be 'NVIDIA A100'" in shape_problem(_plan(expected="NVIDIA A100"), shape)
    mixed = ClusterShape((node, node_shape({"NodeID": "n2", "Resources": {"GPU": 1.0, "accelerator_type:L4": 1}}, [])))
    assert "L4 x 1, NVIDIA H200 x 2 on 2 node(s)" in shape_problem(_plan("NVIDIA H200"), mixed)
    assert "no GPUs" in shape_problem(_plan(), ClusterShape(()))


def _values(names, gpus):
    return [RepeatValue(r, f"run{r}", v, n, g) for r, (v, n, g) in enumerate(zip((2.0, 2.1, 1.9), names, gpus))]


def test_pairs_across_gpu_models_are_refused_and_pairs_across_gpus_reported():
    ref = _values(["H200"] * 3, ["n/a", "n/b", "n/c"])
    same = evaluate_cell(1, _values(["H200"] * 3, ["n/a", "n/b", "n/c"]), [RepeatValue(v.repeat, v.run_id, 1.0, v.gpu_name, v.gpu) for v in ref],
                         confidence=0.9, min_ratio=1.0)
    assert same.status == PASS and same.n_pairs == 3 and same.reason == "" and all(p["same_gpu"] for p in same.pairs)
    cand = _values(["H200", "A100", "H200"], ["n/a", "m/a", "n/x"])
    cell = evaluate_cell(1, cand, [RepeatValue(v.repeat, v.run_id, 1.0, v.gpu_name, v.gpu) for v in ref],
                         confidence=0.9, min_ratio=1.0)
    assert cell.n_pairs == 2 and [p["repeat"] for p in cell.pairs] == [0, 2]
    assert "1 pair(s) refused: different GPU models (repeat 1 ran on A100 vs H200)" in cell.reason
    assert "1 pair(s) ran on different GPUs of the same model" in cell.reason
    assert "unpaired" not in cell.reason
    two = evaluate_cell(1, cand[:2], [RepeatValue(v.repeat, v.run_id, 1.0, v.gpu_name, v.gpu) for v in ref[:2]],
                        confidence=0.9, min_ratio=1.0)
    assert two.status == INCONCLUSIVE and "refused" in two.reason
    # runs without a recorded GPU (older stores) pair as before
    plain = evaluate_cell(1, [RepeatValue(0, "a", 2.0), RepeatValue(1, "b", 2.0)],
                          [RepeatValue(0, "c", 1.0), RepeatValue(1, "d", 1.0)], confidence=0.9, min_ratio=1.0)
    assert plain.n_pairs == 2 and plain.pairs[0]["same_gpu"] is None and plain.reason == ""


def test_the_live_snapshot_carries_progress_per_gpu(tmp_path):
    from console.live import LiveFeed, live_path, read_snapshot

    feed = LiveFeed(tmp_path / "c.duckdb")
    feed.node("host-a/gpu0", node_id="n1", gpu_name="NVIDIA H200", cell="e/c1/measured/0", state="running",
              done=3, planned=8)
    feed.node("host-a/gpu0", done=5)
    feed.finished()
    snap = read_snapshot(live_path(tmp_path / "c.duckdb"))
    assert snap.nodes == {"host-a/gpu0": {"node_id": "n1", "gpu_name": "NVIDIA H200", "cell": "e/c1/measured/0",
                                          "state": "running", "done": 5, "planned": 8}}


def test_a_checkpoint_that_differs_from_earlier_launches_is_named():
    from engine_adapters.cluster import checkpoint_mismatch

    row = {"checkpoint_sha256_json": '{"/m/model.safetensors": "' + "b" * 64 + '"}'}
    assert checkpoint_mismatch(row, {}) is None
    assert checkpoint_mismatch(row, {"/m/model.safetensors": "b" * 64}) is None
    got = checkpoint_mismatch(row, {"/m/model.safetensors": "a" * 64})
    assert got.startswith("checkpoint /m/model.safetensors on ") and "sha256 bbbbbbbbbbbb" in got and "aaaaaaaaaaaa" in got
