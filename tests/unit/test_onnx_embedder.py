"""The MiniLM embedder's sessions: a query on two threads gives the vector one thread gives, to the bit; batches
side by side run on single-threaded sessions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engram.adapters.local import onnx_embedder
from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder

TEXTS = [
    "where does alice live?",
    "What did Caroline research about adoption agencies last May? #17",
    "x",
    "",
    "Die Grenzschicht an einer ebenen Platte bei Überschallströmung, mit Wärmeübergang und Druckgradient.",
    "The boundary layer on a flat plate in supersonic flow, with heat transfer and a pressure gradient along it. " * 2,
]


@pytest.fixture(scope="module")
def two() -> OnnxMiniLMEmbedder:
    if onnx_embedder.usable_cpus() < 2:
        pytest.fail("this test needs two CPUs (the query session then runs on two threads)")
    return OnnxMiniLMEmbedder()


def test_the_query_session_runs_on_two_threads_when_two_cpus_are_usable(two: OnnxMiniLMEmbedder) -> None:
    opts = two._small.get_session_options()
    assert opts.intra_op_num_threads == 2
    assert opts.inter_op_num_threads == 1


def test_two_threads_give_one_threads_vectors_to_the_bit(
    two: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_embedder, "QUERY_THREADS", 1)
    one = OnnxMiniLMEmbedder()
    assert one._small.get_session_options().intra_op_num_threads == 1
    for text in TEXTS:
        got, want = np.asarray(two.embed([text])), np.asarray(one.embed([text]))
        assert got.shape == (1, 384)
        assert got.tobytes() == want.tobytes(), text
    small_batch = TEXTS[:3]  # a few short texts: one padded batch on the query session
    assert np.asarray(two.embed(small_batch)).tobytes() == np.asarray(one.embed(small_batch)).tobytes()


def test_one_cpu_keeps_the_query_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_embedder, "usable_cpus", lambda: 1)
    assert OnnxMiniLMEmbedder()._small.get_session_options().intra_op_num_threads == 1


def test_many_batches_run_on_two_single_threaded_sessions_not_the_query_one(two: OnnxMiniLMEmbedder) -> None:
    texts = [f"passage {i}: " + "supersonic flow over a flat plate " * (1 + i % 40) for i in range(60)]
    together = np.asarray(two.embed(texts))
    used = {name: s.get_session_options().intra_op_num_threads for name, s in two._sessions.items()}
    assert used["one"] == used["pair"] == 1
    assert "batch" not in used
    alone = np.asarray([two.embed([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)  # batched with padding: the same vectors
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_a_text_that_comes_while_a_query_runs_goes_to_a_single_threaded_session(two: OnnxMiniLMEmbedder) -> None:
    want = [np.asarray(two.embed([t])).tobytes() for t in TEXTS]
    fresh = OnnxMiniLMEmbedder()
    assert fresh._small_busy.acquire(blocking=False)  # as if another query were on the two-threaded session now
    assert [np.asarray(fresh.embed([t])).tobytes() for t in TEXTS] == want
    assert fresh._sessions["one"].get_session_options().intra_op_num_threads == 1
    assert fresh._small_busy.locked()  # its own runs went elsewhere and left the session to the other


def test_many_threads_at_once_get_the_vectors_one_caller_gets(two: OnnxMiniLMEmbedder) -> None:
    want = {t: np.asarray(two.embed([t])).tobytes() for t in TEXTS}
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda t: (t, np.asarray(two.embed([t])).tobytes()), TEXTS * 20))
    assert all(vector == want[text] for text, vector in got)
    assert not two._small_busy.locked()  # every run on the query session let it go


def test_no_session_keeps_a_core_spinning_after_a_run(two: OnnxMiniLMEmbedder) -> None:
    """Every pool stops spinning when its run ends (a batch session's spun ~25 ms after each, unless told)."""
    import resource
    import time

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    batch = ["supersonic flow over a flat plate with heat transfer " * 6] * 8  # ~500 padded tokens: `batch`
    for texts in (batch, ["where does alice live"]):
        spent = []
        for _ in range(3):
            two.embed(texts)
            before = cpu()
            time.sleep(0.06)
            spent.append(cpu() - before)
        assert min(spent) < 0.01, (len(texts), spent)
    assert "batch" in two._sessions


def test_states_come_from_the_embedding_pass_with_the_same_vectors(two: OnnxMiniLMEmbedder) -> None:
    texts = ["Jane Smith is a software engineer at Acme Corporation.", "Hi"]
    vectors, states = two.embed_with_states(texts)
    np.testing.assert_allclose(vectors, two.embed(texts), atol=1e-6)
    offsets, pieces = states[0]
    assert pieces.shape == (len(offsets), 2 * two.dim)
    assert [texts[0][a:b] for a, b in offsets[1:3]] == ["Jane", "Smith"]  # pieces map back onto the text


def test_beside_other_calls_every_pass_runs_on_one_thread_with_the_same_vectors(
    two: OnnxMiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#54: while other calls run (engram.kernel.load), no pass spreads over threads that would spin on cores they
    need; the vectors are the ones a call alone gets."""
    from engram.kernel import load

    texts = [*TEXTS, "supersonic flow over a flat plate " * 30]  # the last one over the query session's size
    want = [np.asarray(two.embed([t])).tobytes() for t in texts]
    fresh = OnnxMiniLMEmbedder()
    monkeypatch.setattr(load, "_running", [2])  # this call and another
    assert not load.alone()
    got = [np.asarray(fresh.embed([t])).tobytes() for t in texts]
    many = np.asarray(fresh.embed([f"passage {i}: " + "flow " * (1 + i % 40) for i in range(60)]))
    assert set(fresh._sessions) == {"one"}  # no two-threaded session, no helper thread's session
    assert fresh._sessions["one"].get_session_options().intra_op_num_threads == 1
    np.testing.assert_allclose(np.frombuffer(b"".join(got), np.float32), np.frombuffer(b"".join(want), np.float32),
                               atol=1e-6)  # fmt: skip
    assert many.shape == (60, 384) and np.allclose(np.linalg.norm(many, axis=1), 1.0, atol=1e-5)
    monkeypatch.setattr(load, "_running", [1])  # alone again: the long text goes to the batch session
    fresh.embed([texts[-1]])
    assert "batch" in fresh._sessions
