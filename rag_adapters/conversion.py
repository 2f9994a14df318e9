"""A GGUF converted once into a cached float32 transformers checkpoint (SmolLM2, Gemma 3): de-quantise, then publish
the directory atomically with its ``dprag-complete.json`` marker written last."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["dequantised", "publish_converted"]


def dequantised(tf, torch, quant):
    """A plain float32 copy of a model transformers loaded from a GGUF (its quantization_config dropped)."""
    cfg = quant.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # de-quantised weights: a plain float32 checkpoint
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quant.state_dict(), strict=True)
    return model


def publish_converted(root: Path, target: Path, model, tok, marker: dict) -> Path:
    """Save a converted ``model`` and ``tok`` under ``root`` and move them to ``target`` atomically, the
    ``dprag-complete.json`` marker (``marker``) written last, so an interrupted conversion is never reused; when
    another process finished first, its copy stands."""
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
    try:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        (tmp / "dprag-complete.json").write_text(json.dumps(marker, indent=1))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first
            if not (target / "dprag-complete.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
