#!/usr/bin/env python3
"""Generate the bundled sample workload (Seed-TTS layout) deterministically and offline.

    python scripts/make_sample_workload.py [--out data/sample_workload]

Writes ``en/meta.lst`` (``utt_id|prompt_text|prompt_wav|target_text``), one prompt wav per
speaker in ``en/prompt-wavs/`` (espeak-ng through the espeakng-loader wheel, 16 kHz
16-bit mono, 2-4 s) and ``pools.json`` (``tuning`` = first 64 ids, ``holdout`` = the
other 64). The sentences were written for this project. Running it twice gives
byte-identical files; ``--check`` verifies the committed copy instead of writing.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data.hashing import sha256_bytes  # noqa: E402
from engine_adapters.reference.espeak import EspeakSynth, VoiceParams  # noqa: E402

PROMPT_RATE = 16_000
MIN_PROMPT_S, MAX_PROMPT_S = 2.0, 4.0
TUNING_SIZE = 64


@dataclass(frozen=True)
class Speaker:
    speaker_id: str
    voice: VoiceParams
    prompt_text: str


# Sixteen prompt speakers: different accents (espeak languages), variants, pitch and pace.
SPEAKERS: tuple[Speaker, ...] = (
    Speaker("spk01", VoiceParams("en-us+m3", rate=165, pitch=40), "I usually take the early train into town."),
    Speaker("spk02", VoiceParams("en+f2", rate=180, pitch=60), "Thank you for calling, how can I help you today?"),
    Speaker("spk03", VoiceParams("en-gb-scotland+m7", rate=150, pitch=35), "The weather has been lovely all week long."),
    Speaker("spk04", VoiceParams("en-029+f4", rate=170, pitch=55), "Let me tell you about my favourite holiday."),
    Speaker("spk05", VoiceParams("en-us+Andy", rate=190, pitch=50), "We moved into this house about ten years ago."),
    Speaker("spk06", VoiceParams("en-gb-x-rp+steph", rate=160, pitch=50), "Good evening, and welcome to the local news."),
    Speaker("spk07", VoiceParams("en-us+paul", rate=145, pitch=35), "I think the garden needs a little more sunlight."),
    Speaker("spk08", VoiceParams("en+f1", rate=175, pitch=45), "Could you pass me the salt and pepper, please?"),
    Speaker("spk09", VoiceParams("en-us+m1", rate=185, pitch=25), "My sister plays the piano far better than me."),
    Speaker("spk10", VoiceParams("en+Annie", rate=195, pitch=65), "The meeting starts in five minutes, so hurry up."),
    Speaker("spk11", VoiceParams("en-us-nyc+m6", rate=170, pitch=55), "I have never seen so many stars in the sky."),
    Speaker("spk12", VoiceParams("en-gb-x-gbclan+f3", rate=155, pitch=50), "This is the best soup I have tasted in years."),
    Speaker("spk13", VoiceParams("en-us+david", rate=175, pitch=45), "Our team won the match on the very last kick."),
    Speaker("spk14", VoiceParams("en+belinda", rate=160, pitch=40), "Please leave a short message after the tone."),
    Speaker("spk15", VoiceParams("en-gb-x-gbcwmd+m4", rate=160, pitch=50), "The bookshop downstairs is having a big sale."),
    Speaker("spk16", VoiceParams("en-us+f5", rate=185, pitch=70), "I always forget where I parked the car."),
)

# 128 target sentences written for this project (6-20 words; numbers spelled out, no hyphens,
# so the Seed-TTS WER normalisation leaves them unambiguous).
TARGETS: tuple[str, ...] = (
    "The museum opens at ten, but guided tours only begin after lunch.",
    "Please remember to water the tomatoes before you leave for the weekend.",
    "My grandmother kept every letter she ever received in a wooden box.",
    "If the train is late again, we should probably take the bus instead.",
    "He painted the fence green because the neighbours asked him nicely.",
    "Nobody expected the small bakery on the corner to win a national prize.",
    "Turn left at the second roundabout and follow the signs to the station.",
    "We spent the whole afternoon arguing about the best way to cook rice.",
    "The library will be closed on Monday for a staff training day.",
    "She fixed the bicycle chain with nothing but a spoon and some patience.",
    "Our flight was delayed twice, so we ended up sleeping at the airport.",
    "The children built a surprisingly sturdy bridge out of cardboard and tape.",
    "Could you send me the final version of the report by Thursday morning?",
    "A thick fog rolled in from the harbour just as the concert began.",
    "The old clock in the hallway still chimes fifteen minutes too early.",
    "I prefer walking to work, even when it rains a little.",
    "The recipe calls for two eggs, a cup of flour, and a pinch of salt.",
    "After the storm, the whole street helped clear the fallen branches.",
    "He learned to play the violin when he was already forty.",
    "The new software update made the old laptop noticeably faster.",
    "Most of the guests left early, but a few stayed to help with the dishes.",
    "Keep the receipt in case the shoes do not fit your sister.",
    "The river was so calm that evening it looked like polished glass.",
    "Every Friday the office orders pizza and plays a short quiz.",
    "I can never remember whether the meeting is on the third or fourth floor.",
    "The gardener planted tulips along the path leading to the front door.",
    "Their dog barks at every delivery van but ignores the postman completely.",
    "We watched the sunrise from the top of the hill, wrapped in blankets.",
    "The price of coffee has gone up again at the station kiosk.",
    "She wrote the entire novel by hand before typing a single page.",
    "Listening carefully is often more useful than having the right answer.",
    "The bus driver waited patiently while an old man found his ticket.",
    "Our neighbours are moving to the coast after thirty years in the city.",
    "The football match was cancelled because the pitch was completely flooded.",
    "Please switch off the lights when you leave the meeting room.",
    "The teacher asked everyone to bring a photograph from their childhood.",
    "A small boat drifted slowly past the lighthouse at dawn.",
    "He always orders the same soup, no matter how long the menu is.",
    "The hotel room had a balcony with a view of the mountains.",
    "It took three attempts before the kite finally rose above the trees.",
    "The bakery sells out of fresh bread by eight o'clock most mornings.",
    "I found my old school report while cleaning out the attic.",
    "The engineers tested the bridge with trucks full of sand.",
    "Her laugh could be heard from the other end of the corridor.",
    "We need more chairs if the whole family is coming for dinner.",
    "The museum guard politely asked us not to touch the paintings.",
    "On clear nights you can see the planets without a telescope.",
    "The printer jammed just before the most important presentation of the year.",
    "My brother insists that pineapple belongs on pizza.",
    "The village holds a music festival at the end of every summer.",
    "Several students stayed late to finish their science project.",
    "The waiter recommended the fish, which turned out to be excellent.",
    "Fresh snow covered the cars parked along the narrow street.",
    "Remember to charge your phone before the long drive tomorrow.",
    "The puppy fell asleep in the middle of the kitchen floor.",
    "The company plans to open a second office in the spring.",
    "We argued about the map until we realised it was upside down.",
    "A gentle breeze carried the smell of cut grass through the window.",
    "The orchestra rehearsed the final movement again and again.",
    "He keeps a notebook by his bed to write down his dreams.",
    "The shop on the corner repairs watches, radios, and old cameras.",
    "The tickets sold out within minutes of going on sale.",
    "She taught herself to code by building small games for her cousins.",
    "Our cat refuses to eat anything except one particular brand of food.",
    "The mountain path was steep, narrow, and covered in loose stones.",
    "The doctor said I should drink more water and sleep a little longer.",
    "The market is busiest on Saturday mornings, just after nine.",
    "I left my umbrella on the train, so I arrived soaking wet.",
    "The farmer checked the weather forecast before harvesting the wheat.",
    "They painted the nursery a soft shade of yellow.",
    "The lecture was fascinating, although the room was far too warm.",
    "A flock of geese flew low over the frozen lake.",
    "Could you turn the music down a little while I make this call?",
    "The hikers reached the cabin just before the sun went down.",
    "My neighbour grows enormous pumpkins for the autumn fair.",
    "The team celebrated their victory with a quiet dinner.",
    "The kettle whistled loudly, waking everyone in the house.",
    "This road is closed for repairs until the end of next month.",
    "The artist spent weeks mixing the perfect shade of blue.",
    "We found a tiny cafe hidden behind the cathedral.",
    "The new bridge will cut the journey to the airport in half.",
    "He apologised for being late and handed me a bunch of flowers.",
    "The students listened quietly as the professor explained the experiment.",
    "There is a spare key under the flowerpot by the back door.",
    "The storm knocked out the power for most of the evening.",
    "Our grandparents met at a dance hall in nineteen sixty two.",
    "She always reads the last page of a book first.",
    "The parcel arrived three days early, which surprised everyone.",
    "The swimming pool is closed for cleaning every Tuesday morning.",
    "I would like a table for four near the window, please.",
    "The pilot announced that we would be landing twenty minutes ahead of schedule.",
    "A single candle lit the small room at the top of the stairs.",
    "The builders finished the roof just before the rain arrived.",
    "Please keep your voice down, the baby has just fallen asleep.",
    "The festival attracts visitors from all over the country.",
    "He measured the room twice before ordering the new carpet.",
    "We took the scenic route and stopped at every viewpoint.",
    "The cheese shop offers free samples on Saturday afternoons.",
    "The detective noticed a muddy footprint near the window.",
    "She practised her speech in front of the mirror all week.",
    "The library has a quiet room for anyone who needs to study.",
    "Our train passed through fields of bright yellow flowers.",
    "The mechanic found a small nail in the back tyre.",
    "Let's meet at the fountain in the main square at noon.",
    "The chef tasted the sauce and added a little more pepper.",
    "A group of tourists gathered around the statue to take photographs.",
    "The heating broke down on the coldest day of the year.",
    "My aunt sends a postcard from every city she visits.",
    "The volunteers planted two hundred trees along the river bank.",
    "He forgot his password and had to reset it three times.",
    "The sound of the waves helped me fall asleep.",
    "The committee will announce the winners at the end of the evening.",
    "She borrowed my ladder last spring and never brought it back.",
    "Early in the morning the streets are almost completely empty.",
    "The zoo recently welcomed a baby giraffe.",
    "I have read that article twice and still do not understand it.",
    "The choir sang beautifully despite the terrible acoustics of the hall.",
    "Bring a warm jacket, because the evenings get cold in the desert.",
    "The students organised a bake sale to raise money for the trip.",
    "The lighthouse keeper wrote a diary entry every single night.",
    "Traffic was light, so we arrived at the stadium early.",
    "The clock tower has been repaired after years of silence.",
    "Somebody left a bag of apples on our doorstep this morning.",
    "The journalist checked every fact before the story was published.",
    "My phone battery always dies at the worst possible moment.",
    "The apprentice carefully polished the silver candlesticks.",
    "We should plant the seeds once the last frost has passed.",
    "The ferry crossing takes about forty minutes in calm weather.",
)

README = """# Sample workload

Generated by `scripts/make_sample_workload.py` (deterministic, offline); do not edit by hand.
Seed-TTS layout: `en/meta.lst` lines are `utt_id|prompt_text|prompt_wav|target_text`, with
`utt_id` = `<speaker>-<target-id>`. {n_speakers} prompt speakers (espeak-ng voices with different
accents, variants, pitch and pace; 16 kHz 16-bit mono, 2-4 s), {n_targets} target sentences
written for this project. Pools in `pools.json`: `tuning` (first {tuning} ids) and `holdout`
(the other {holdout}); every speaker appears in both.
"""


def trim_silence(samples: np.ndarray, rate: int, keep_s: float = 0.1, threshold: int = 200) -> np.ndarray:
    """Drop leading/trailing near-silence, keeping ``keep_s`` seconds of margin on each side."""
    loud = np.nonzero(np.abs(samples.astype(np.int32)) > threshold)[0]
    if len(loud) == 0:
        return samples
    margin = int(keep_s * rate)
    return samples[max(0, loud[0] - margin): loud[-1] + margin + 1]


def prompt_wav(synth: EspeakSynth, speaker: Speaker) -> bytes:
    """The speaker's prompt as 16 kHz 16-bit mono WAV bytes."""
    raw = synth.synthesize(speaker.prompt_text, speaker.voice)
    audio = soxr.resample(raw.astype(np.float32) / 32768.0, synth.sample_rate, PROMPT_RATE, quality="HQ")
    pcm = trim_silence(np.clip(np.round(audio * 32768.0), -32768, 32767).astype(np.int16), PROMPT_RATE)
    duration = len(pcm) / PROMPT_RATE
    if not MIN_PROMPT_S <= duration <= MAX_PROMPT_S:
        raise SystemExit(f"{speaker.speaker_id}: prompt lasts {duration:.2f}s, outside "
                         f"{MIN_PROMPT_S}-{MAX_PROMPT_S}s; adjust its text or rate")
    buf = io.BytesIO()
    soundfile.write(buf, pcm, PROMPT_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def build() -> dict[str, bytes]:
    """Every file of the workload as {relative path: bytes}."""
    if len({s.speaker_id for s in SPEAKERS}) != len(SPEAKERS):
        raise SystemExit("duplicate speaker ids")
    if len(set(TARGETS)) != len(TARGETS):
        raise SystemExit("duplicate target sentences")
    for text in TARGETS:
        words = len(text.split())
        if not 6 <= words <= 20 or "|" in text:
            raise SystemExit(f"target sentence has {words} words or a '|': {text!r}")
    synth = EspeakSynth.shared()
    files: dict[str, bytes] = {}
    for speaker in SPEAKERS:
        files[f"en/prompt-wavs/{speaker.speaker_id}.wav"] = prompt_wav(synth, speaker)
    lines, ids = [], []
    for index, text in enumerate(TARGETS, start=1):
        speaker = SPEAKERS[(index - 1) % len(SPEAKERS)]
        utt_id = f"{speaker.speaker_id}-{index:04d}"
        ids.append(utt_id)
        lines.append(f"{utt_id}|{speaker.prompt_text}|prompt-wavs/{speaker.speaker_id}.wav|{text}")
    files["en/meta.lst"] = ("\n".join(lines) + "\n").encode()
    pools = {"tuning": ids[:TUNING_SIZE], "holdout": ids[TUNING_SIZE:]}
    files["pools.json"] = (json.dumps(pools, indent=2) + "\n").encode()
    files["README.md"] = README.format(n_speakers=len(SPEAKERS), n_targets=len(TARGETS),
                                       tuning=TUNING_SIZE, holdout=len(TARGETS) - TUNING_SIZE).encode()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "data" / "sample_workload")
    parser.add_argument("--check", action="store_true", help="verify the files under --out instead of writing")
    args = parser.parse_args(argv)
    files = build()
    if args.check:
        stale = [rel for rel, data in files.items()
                 if not (args.out / rel).is_file() or (args.out / rel).read_bytes() != data]
        for rel in stale:
            print(f"differs: {args.out / rel}", file=sys.stderr)
        return 1 if stale else 0
    for rel, data in files.items():
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    total = sum(len(d) for d in files.values())
    digest = sha256_bytes(b"".join(files[k] for k in sorted(files)))[:16]
    print(f"wrote {len(files)} files ({total / 1e6:.2f} MB, digest {digest}) under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
