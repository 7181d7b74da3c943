"""`campaign plan init --engines vllm-omni,sglang-omni,peer`: the real-engine plan freezes once its
placeholders are filled in, and is refused before, naming every field path left."""

from __future__ import annotations

import json
from pathlib import Path

from console.cli import main
from data.plan_validation import placeholder_paths

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "tests" / "data" / "vllm_omni_0_30_0_deploy" / "minicpmo_4_5_turn.yaml"


def _fill(doc: dict, tmp: Path) -> dict:
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    pools = tmp / "pools.json"
    assert main(["workload", "pools", str(REPO / "data" / "sample_workload"), "--define", "tuning=0:64",
                 "--define", "holdout=64:128", "-o", str(pools)]) == 0
    values = {"<campaign name>": "h200-three-engines", "<what this campaign decides>": "who serves faster",
              "<model revision>": "503e754", "<model dir>": str(model), "<vllm-omni version or git sha>": "0.30.0",
              "<sglang-omni git sha>": "0970348", "<peer git sha>": "abc1234", "<peer profile name>": "default",
              "<vllm-omni | sglang-omni | pcm>": "pcm", "<peer launch command>": "/opt/peer/bin/serve",
              "<seed-tts-eval dir (contains en/meta.lst)>": str(REPO / "data" / "sample_workload"),
              "<pools.json written by campaign workload pools>": str(pools),
              "<python of the vllm-omni environment>": "/opt/vllm-omni/bin/python",
              "<vllm-omni checkout at the engine's revision>": str(tmp),
              "<python of the sglang-omni environment>": "/opt/sglang-omni/bin/python",
              "<sglang-omni checkout at the engine's revision>": str(tmp),
              "<peer test command>": "/opt/peer/bin/selftest", "<peer checkout>": str(tmp),
              "<GPU name as NVML reports it, e.g. NVIDIA L20X>": "NVIDIA L20X"}
    text = json.dumps(doc)
    for k, v in values.items():
        text = text.replace(json.dumps(k)[1:-1], v)
    doc = json.loads(text)
    for e in doc["engines"]:
        e["argv"] = [str(DEPLOY) if a.startswith("<path to minicpmo") else a for a in e["argv"]]
        e["source"] = {"vllm-omni-main": {"dist": "vllm-omni"}, "sglang-omni-main": {"dist": "sglang-omni"}}.get(
            e["name"], {"git": str(tmp)})  # the template's source placeholder is an object to fill in
        if e.get("config_path"):
            e["config_path"] = str(DEPLOY)
    doc["quality"]["candidate"] = "sglang-omni-main"
    doc["decision_rules"][0]["candidate"] = "sglang-omni-main"
    doc["quality"]["model_paths"] = {k: str(model) for k in doc["quality"]["model_paths"]}
    return doc


def test_real_engine_plan_refused_until_filled_then_freezes(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    db = tmp_path / "campaign.duckdb"
    assert main(["plan", "init", "--engines", "vllm-omni,sglang-omni,peer", "-o", str(plan)]) == 0
    doc = json.loads(plan.read_text())
    v, s, p = doc["engines"]
    assert (v["adapter"], v["dialect"], s["adapter"], s["dialect"], p["adapter"]) == (
        "vllm_omni", "vllm-omni", "sglang_omni", "sglang-omni", "peer")
    assert v["argv"][v["argv"].index("--deploy-config") + 1] == v["config_path"]  # one file: hashed and launched
    assert v["request"]["voice_prompt"] == "ref_audio"
    assert doc["quality"]["scorers"] == {"wer": "whisper", "sim": "seedtts-sim", "mos": "utmos22"}
    assert doc["quality"]["baseline"] == "vllm-omni-main"
    rule = doc["decision_rules"][0]
    assert (rule["reference"], rule["concurrencies"]) == ("peer", [16, 32])
    # each engine's own repository tests gate that engine (docs/engines.md, "Validators")
    assert [(x["applies_to"], x["argv"][1:4]) for x in doc["validators"]] == [
        (["vllm-omni-main"], ["-m", "pytest", "-q"]), (["sglang-omni-main"], ["-m", "pytest", "-q"]), (["peer"], [])]
    assert doc["validators"][1]["argv"][-1] == "tests/unit_test/minicpm_o"
    capsys.readouterr()
    assert main(["plan", "freeze", str(plan), "--db", str(db)]) != 0
    err = capsys.readouterr().err
    left = placeholder_paths(doc)
    assert err.count("\n") == 1 and f"{len(left)} placeholder(s) left" in err
    for path in ("engines[0].revision", "engines[0].config_path", "engines[2].dialect", "quality.model_paths.whisper",
                 "workload.pools_file", "quality.candidate", "decision_rules[0].candidate"):
        assert path in left and path in err
    assert not any(x.startswith("_") or "._" in x for x in left)  # comments are not values

    plan.write_text(json.dumps(_fill(doc, tmp_path), indent=2))
    assert main(["plan", "freeze", str(plan), "--db", str(db)]) == 0
    assert "froze plan 'h200-three-engines'" in capsys.readouterr().out


def _cli(*args, cwd=None):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or REPO, timeout=120)


def test_plan_init_names_gpu_peer_dialects_admission_flags_and_size(tmp_path):
    """`plan init --engines ... --gpu NAME`: the GPU named (not a hard-coded H200), the peer entry
    saying what to fill and which dialects exist, each real engine's admission-limit flag in its argv
    at the sweep's largest C, and the campaign's request count and wall-time estimate printed."""
    plan = tmp_path / "plan.json"
    r = _cli("plan", "init", "--engines", "vllm-omni,sglang-omni,peer", "--gpu", "NVIDIA L20X", "-o", plan)
    assert r.returncode == 0, r.stderr
    doc = json.loads(plan.read_text())
    assert doc["gpu"]["expected_name"] == "NVIDIA L20X"
    v, s, p = doc["engines"]
    top = str(max(doc["sweep"]["concurrencies"]))
    assert v["argv"][v["argv"].index("--max-num-seqs") + 1] == top
    assert s["argv"][s["argv"].index("--thinker-max-running-requests") + 1] == top
    assert p["dialect"] == "<vllm-omni | sglang-omni | pcm>"
    for word in ("argv", "profile", "dialect", "vllm-omni", "sglang-omni", "pcm"):
        assert word in p["_comment"]
    # 3 engines x 6 C x (1 warmup + 3 measured) repeats x 320 requests
    assert "sweep: 72 cells, 23,040 requests" in r.stdout
    assert "holdout (quality): 24 cells" in r.stdout
    est = [ln for ln in r.stdout.splitlines() if ln.startswith("estimated wall time")]
    assert len(est) == 1 and "ceil(requests / C) x 5 s per request" in est[0] and "96 engine launches x 120 s" in est[0]
    # sum over the 4 repeats x 3 engines of ceil(320/C) over C in 1,2,4,8,16,32 = 320+160+80+40+20+10 = 630
    # -> 12 x 630 x 5 s = 37800 s, + 96 x 120 s = 11520 s: 49320 s = 13 h 42 min
    assert "about 13 h 42 min" in est[0]
    r2 = _cli("plan", "init", "--engines", "peer", "--request-s", "1", "--start-s", "0", "-o", tmp_path / "p2.json")
    assert r2.returncode == 0 and "about 42 min" in r2.stdout  # 4 x 630 x 1 s = 2520 s

    for bad, needle in ((["--gpu", "X"], "--gpu: only with --engines"),
                        (["--engines", "peer", "--request-s", "nan"], "--request-s nan")):
        r = _cli("plan", "init", *bad, "-o", tmp_path / "bad.json")
        assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1
        assert not (tmp_path / "bad.json").exists()


def test_plan_init_default_gpu_is_what_nvml_sees(tmp_path):
    """Without --gpu the template names the GPU NVML sees here (engine_adapters/telemetry.py), or a
    placeholder that freeze refuses until filled."""
    from engine_adapters.telemetry import gpu_identity

    gpus, _ = gpu_identity()
    plan = tmp_path / "plan.json"
    r = _cli("plan", "init", "--engines", "vllm-omni", "-o", plan)
    assert r.returncode == 0, r.stderr
    name = json.loads(plan.read_text())["gpu"]["expected_name"]
    assert name == (gpus[0]["name"] if gpus else "<GPU name as NVML reports it, e.g. NVIDIA L20X>")
    assert f"gpu.expected_name: {name}" in r.stdout


def test_real_engine_templates_need_no_installed_console(monkeypatch):
    """On a GPU host the console may run from a checkout (PYTHONPATH): only the demo's engines name
    the installed distribution, so only `plan init --demo` needs it (seen on the H200 machine,
    2026-12-03: `plan init --engines` refused with 'omni-campaign-console is not installed')."""
    import importlib.metadata

    from console.commands.plan import template

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert template(False, ["vllm-omni", "sglang-omni", "peer"], "NVIDIA H200")["gpu"]["expected_name"] == "NVIDIA H200"
    assert template(False)["engines"][0]["revision"] == "<git sha>"
    try:
        template(True)
    except Exception as exc:  # the demo's engines are the installed console: named in one line
        assert "is not installed" in str(exc)
    else:
        raise AssertionError("the demo template named an engine source that is not installed")
