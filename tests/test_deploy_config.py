"""Deploy configuration resolution (engine_adapters/deploy_config.py) against unmodified copies of
the deploy files vllm-omni 0.30.0 packages (tests/data/vllm_omni_0_30_0_deploy/, from the wheel's
vllm_omni/deploy/), `base_config` included; a real launch stores the file's hash and the resolved
per-stage limits; the report marks concurrencies above the admission limit."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from plans_helpers import free_port

from stats.results.report import admission_limits, concurrency_label
from console.recording import launch_engine, stop_engine
from data.errors import CampaignError
from engine_adapters.deploy_config import deploy_record, stage_options, vllm_deploy_summary
from data.plan_model import EngineSpec

DEPLOY = Path(__file__).resolve().parent / "data" / "vllm_omni_0_30_0_deploy"
TALKER = {"temperature": 0.8, "top_p": 0.85, "top_k": 25, "repetition_penalty": 1.05, "min_tokens": 50,
          "max_tokens": 4096, "seed": 42}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_packaged_default_is_duplex_with_four_slots():
    d = vllm_deploy_summary(DEPLOY / "minicpmo_4_5.yaml")
    assert d["session_mode"] == "duplex" and d["max_sessions"] == 4 and d["pipeline"] == "minicpmo_4_5"
    assert [(s["stage_id"], s["max_num_seqs"], s["num_replicas"]) for s in d["stages"]] == [(0, 4, 1), (1, 4, 1), (2, 4, 1)]
    assert d["stages"][1]["default_sampling_params"] == TALKER
    assert d["stages"][0]["default_sampling_params"]["temperature"] == 0.0
    assert d["admission_limit"] == 4
    assert d["files"] == [{"path": str((DEPLOY / "minicpmo_4_5.yaml").resolve()), "sha256": _sha(DEPLOY / "minicpmo_4_5.yaml")}]


def test_turn_file_follows_base_config():
    d = vllm_deploy_summary(DEPLOY / "minicpmo_4_5_turn.yaml")
    assert d["session_mode"] == "turn"  # the overlay's scalar wins
    assert [f["sha256"] for f in d["files"]] == [_sha(DEPLOY / "minicpmo_4_5_turn.yaml"), _sha(DEPLOY / "minicpmo_4_5.yaml")]
    assert [s["max_num_seqs"] for s in d["stages"]] == [4, 4, 4] and d["stages"][1]["default_sampling_params"] == TALKER
    assert d["admission_limit"] == 4  # turn mode: max_sessions no longer applies, the stages still admit 4


def test_overlay_stage_fields_merge_by_stage_id():
    d = vllm_deploy_summary(DEPLOY / "minicpmo_4_5_3gpu_stage1_replicas.yaml")
    st = {s["stage_id"]: s for s in d["stages"]}
    assert st[1]["num_replicas"] == 2 and st[1]["devices"] == "1,2" and st[1]["max_num_seqs"] == 4
    assert st[1]["default_sampling_params"] == TALKER and st[0]["devices"] == "0"
    assert d["session_mode"] == "duplex" and d["admission_limit"] == 4


def test_bad_deploy_configs_are_one_line_errors(tmp_path):
    loop = tmp_path / "a.yaml"
    loop.write_text("base_config: a.yaml\n")
    bad = tmp_path / "b.yaml"
    bad.write_text("stages: [\n")
    for path, needle in ((loop, "loops"), (bad, "invalid YAML"), (tmp_path / "none.yaml", "no such file")):
        with pytest.raises(CampaignError, match=needle) as info:
            vllm_deploy_summary(path)
        assert "\n" not in str(info.value)
    with pytest.raises(CampaignError, match="is not config_path"):
        deploy_record("vllm_omni", ["vllm", "serve", "m", "--deploy-config", str(DEPLOY / "minicpmo_4_5.yaml")],
                      str(DEPLOY / "minicpmo_4_5_turn.yaml"), "v")


def test_sglang_stage_options_are_recorded():
    argv = ["sgl-omni", "serve", "--model-path", "/m", "--port", "8092",
            "--talker.server_args.max_running_requests", "8", "--thinker.server_args.mem_fraction_static=0.5"]
    assert stage_options(argv) == {"talker": {"server_args": {"max_running_requests": "8"}},
                                   "thinker": {"server_args": {"mem_fraction_static": "0.5"}}}
    rec = deploy_record("sglang_omni", argv, None, "s")
    assert rec["admission_limit"] == 8 and rec["kind"] == "sglang-omni stage options"
    assert deploy_record("sglang_omni", ["sgl-omni", "serve", "--port", "1"], None, "s") is None



def test_launch_stores_deploy_hash_and_limits(store, tmp_path):
    turn = DEPLOY / "minicpmo_4_5_turn.yaml"
    port = free_port()
    # a real launch of the reference engine under the vllm_omni adapter, with the deploy file as config_path
    argv = (sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", "fast",
            "--port", str(port))
    spec = EngineSpec("vllm-omni-main", "vllm_omni", "vllm-omni", argv=argv, port=port, health_timeout_s=90,
                      config_path=str(turn))
    eng = launch_engine(store, spec, log_dir=tmp_path / "logs", plan_hash="p" * 64)
    stop_engine(store, eng, grace_s=2)
    row = store.query("SELECT config_sha256, deploy_json, status FROM engine_launches WHERE launch_id = ?", [eng.launch_id])[0]
    deploy = json.loads(row["deploy_json"])
    assert row["config_sha256"] == _sha(turn) == deploy["files"][0]["sha256"]
    assert deploy["files"][1]["sha256"] == _sha(DEPLOY / "minicpmo_4_5.yaml")
    assert [s["max_num_seqs"] for s in deploy["stages"]] == [4, 4, 4] and deploy["admission_limit"] == 4

    class _Plan:
        hash = "p" * 64
    assert admission_limits(store, _Plan()) == {"vllm-omni-main": 4}
    assert [concurrency_label(c, 4) for c in (1, 4, 16, 32)] == ["1", "4", "16 > limit 4", "32 > limit 4"]


def test_admission_flags_on_the_command_line_win_over_the_files():
    """`plan init --engines` writes each engine's admission-limit flag into its argv; the launch
    record must carry the value the engine runs with, not the deploy file's (vLLM-Omni applies a
    typed --max-num-seqs over every stage; sgl-omni serve's --thinker-max-running-requests)."""
    turn = str(DEPLOY / "minicpmo_4_5_turn.yaml")
    argv = ["vllm", "serve", "/m", "--omni", "--deploy-config", turn, "--max-num-seqs", "32", "--port", "1"]
    rec = deploy_record("vllm_omni", argv, turn, "v")
    assert [s["max_num_seqs"] for s in rec["stages"]] == [32, 32, 32]
    assert rec["admission_limit"] == 32 and rec["cli"] == {"max_num_seqs": 32}
    assert deploy_record("vllm_omni", argv[:6] + ["--max_num_seqs=8"], turn, "v")["admission_limit"] == 8
    assert deploy_record("vllm_omni", argv[:6], turn, "v")["admission_limit"] == 4  # the file's, untouched
    duplex = str(DEPLOY / "minicpmo_4_5.yaml")  # duplex: max_sessions 4 still bounds it
    assert deploy_record("vllm_omni", ["vllm", "serve", "/m", "--deploy-config", duplex, "--max-num-seqs", "32"],
                         duplex, "v")["admission_limit"] == 4
    sg = ["sgl-omni", "serve", "--model-path", "/m", "--thinker-max-running-requests", "32", "--port", "2"]
    rec = deploy_record("sglang_omni", sg, None, "s")
    assert rec["admission_limit"] == 32 and rec["cli"] == {"thinker_max_running_requests": "32"}
    rec = deploy_record("sglang_omni", sg + ["--talker.server_args.max_running_requests", "8"], None, "s")
    assert rec["admission_limit"] == 8
