"""What the commands at the repository root import: config, errors, tokenizers, checkpoints and
atomic writes, the run directory, the runtime (device, dtype, DDP, signals, threads, peak FLOP/s),
the training step, plots and results tables, attention views, the coreference probe and the
Hugging Face mapping. The model itself is `model.py` at the root; run everything from there."""
