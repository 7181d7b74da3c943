"""Speech quality scoring: Seed-TTS WER, speaker similarity and MOS, with real (local model
folders) and bundled (offline) scorers, written to `quality_scores` with full coverage
accounting. See docs/quality.md."""
