"""Seed-TTS workload loader: the bundled sample loads cleanly; broken copies report each bad line."""

from __future__ import annotations

import shutil

import pytest
import soundfile as sf

from console.cli import main
from data.errors import CampaignError
from data.workload import SAMPLE_WORKLOAD, load_workload


def test_sample_workload_is_complete():
    wl = load_workload()
    assert wl.locale == "en"
    assert wl.errors == []
    assert wl.missing_prompt_wavs() == []
    assert 100 <= len(wl.utterances) <= 200
    assert len(wl.speakers) >= 16
    assert {"tuning", "holdout"} <= set(wl.pools)
    assert not set(wl.pools["tuning"]) & set(wl.pools["holdout"])
    for u in wl.utterances:
        assert u.utt_id.startswith(u.speaker + "-")
        assert u.prompt_text and u.target_text
    info = sf.info(str(wl.utterances[0].prompt_wav))
    assert info.channels == 1 and info.duration > 1.0


def test_broken_copy_reports_every_bad_line(tmp_path, capsys):
    root = tmp_path / "wl"
    shutil.copytree(SAMPLE_WORKLOAD, root)
    meta = root / "en" / "meta.lst"
    lines = meta.read_text().splitlines()
    good = len(lines)
    first = lines[0].split("|")
    lines[3] = "only|three|fields"
    lines[7] = "|".join(["nodash"] + first[1:4])
    lines[9] = lines[0]  # duplicate id
    lines[11] = "|".join([first[0] + "x"] + first[1:3] + [""])
    meta.write_text("\n".join(lines) + "\n")
    (root / "pools.json").unlink()

    wl = load_workload(root)
    problems = {e.line_no: e.problem for e in wl.errors}
    assert set(problems) == {4, 8, 10, 12}
    assert "found 3" in problems[4]
    assert "no '-'" in problems[8]
    assert "duplicate utt_id" in problems[10] and "line 1" in problems[10]
    assert "empty target_text" in problems[12]
    assert len(wl.utterances) == good - 4

    assert main(["workload", "show", str(root)]) == 1
    out = capsys.readouterr().out
    for n in (4, 8, 10, 12):
        assert f"meta.lst:{n}:" in out


def test_missing_prompt_wav_is_listed(tmp_path, capsys):
    root = tmp_path / "wl"
    shutil.copytree(SAMPLE_WORKLOAD, root)
    wl = load_workload(root)
    wl.utterances[0].prompt_wav.unlink()
    assert load_workload(root).missing_prompt_wavs()
    assert main(["workload", "show", str(root)]) == 1
    assert "missing prompt wav" in capsys.readouterr().out


def test_sample_workload_cli_summary(capsys):
    assert main(["workload", "show"]) == 0
    out = capsys.readouterr().out
    assert "utterances" in out and "pool holdout" in out


@pytest.mark.parametrize("make, needle", [
    (lambda p: None, "no <locale>/meta.lst"),
    (lambda p: (p / "en").mkdir() or (p / "en" / "meta.lst").write_bytes(b"\xff\xfe\xfa"), "not UTF-8"),
])
def test_unusable_directories_are_one_line_errors(tmp_path, make, needle):
    make(tmp_path)
    with pytest.raises(CampaignError, match=needle):
        load_workload(tmp_path)


def test_pool_with_unknown_id(tmp_path):
    root = tmp_path / "wl"
    shutil.copytree(SAMPLE_WORKLOAD, root)
    (root / "pools.json").write_text('{"holdout": ["nobody-0001"]}')
    with pytest.raises(CampaignError, match="unknown utterance id"):
        load_workload(root)
