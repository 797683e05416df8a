"""The vector arm's walk: exact for a principal who reads few chunks, one wide walk without iterating
for one who reads a fair share of the tenant, pgvector's iterative scan for a thin share, and the
iterating walk again when a wide walk found too few."""

from __future__ import annotations

import pytest

from retrieval.vector_arm import EXACT_BELOW, MAX_BEAM, Walk, ef_search, pool, vector_walk, walk_again, walked


def test_a_principal_reading_few_chunks_is_ranked_exactly():
    assert vector_walk(limit=100, readable=EXACT_BELOW - 1, tenant_chunks=150_000).exact
    assert not vector_walk(limit=100, readable=EXACT_BELOW, tenant_chunks=150_000).exact


@pytest.mark.parametrize(
    ("readable", "beam"),
    [(60_100, 229), (150_000, ef_search(100)), (100_000, 131), (30_000, 474)],
)
def test_the_beam_covers_the_first_candidates_for_the_share_read(readable, beam):
    """40% of 150,000, 100 candidates asked: the beam is sized for the first 60 (a pool of 72) plus
    3 standard deviations of what passes the ACL, over the share read; a principal who reads
    everything walks with the whole pool's beam."""
    assert walked(100) == 60 and pool(60) == 72
    walk = vector_walk(limit=100, readable=readable, tenant_chunks=150_000)
    assert walk == Walk(exact=False, ef_search=beam, iterative=False)
    assert walk.ef_search * readable / 150_000 >= pool(walked(100))


def test_a_thin_share_iterates_from_the_pool():
    walk = vector_walk(limit=100, readable=9_000, tenant_chunks=150_000)  # would need a beam of 1,612
    assert walk == Walk(exact=False, ef_search=ef_search(100), iterative=True)
    assert vector_walk(limit=100, readable=None, tenant_chunks=None).iterative  # no ACL: the baseline
    assert MAX_BEAM == 1000  # pgvector's largest ef_search


def test_only_a_wide_walk_that_found_too_few_of_many_walks_again():
    wide = Walk(exact=False, ef_search=363, iterative=False)
    assert walk_again(wide, found=57, limit=100, readable=60_100) == Walk(False, ef_search(100), True)
    assert walk_again(wide, found=60, limit=100, readable=60_100) is None  # the first 60 were found
    assert walk_again(wide, found=87, limit=100, readable=60_100) is None
    assert walk_again(wide, found=40, limit=100, readable=40) is None  # all there is
    assert walk_again(Walk(False, 120, True), found=40, limit=100, readable=60_100) is None
    assert walk_again(Walk(True, 120, False), found=40, limit=100, readable=60_100) is None
