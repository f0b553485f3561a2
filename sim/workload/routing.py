"""Where a token's top-k experts sit: how many other ranks and other NVLink domains one token
reaches, which sets the bytes of a dispatcher that sends a token once per destination.

Megatron-Core's all-to-all dispatcher sends one copy per (token, expert) pair: it permutes the
tokens by expert before the all-to-all (``MoEAlltoAllTokenDispatcher``), so a token two of whose
experts share a rank goes there twice. DeepEP sends a token once per destination rank within a
node (its ``is_token_in_rank`` layout) and once per destination node over RDMA, where the node's
NVLink forwards it to the ranks that need it (DeepEP README, "normal kernels": NVLink and RDMA
forwarding; DeepSeek-V3 report, arXiv 2412.19437, section 3.2.2: each token to at most 4 nodes,
"the number of tokens... sent through IB" bounded by it); HybridEP keeps that rule (one RDMA send
per token and node: the test_hybrid_ep.py of DeepEP's hybrid-ep branch counts the RDMA bytes as
the tokens that need the remote node x hidden x 2 B).

How many destinations a token has depends on how the router picks its experts:

- ``learned`` (the default): the top-k experts of a token spread like k distinct experts drawn at
  random: what a trained router does on average, and what Megatron's benchmark switch
  ``--moe-router-force-load-balancing`` does exactly (random logits before the top-k:
  megatron/core/transformer/moe/router.py ``TopKRouter.forward``, NVIDIA/Megatron-LM @d98e8a6).
  Group-limited routing (DeepSeek-V3's ``n_group`` 8 / ``topk_group`` 4, Megatron's
  ``moe_router_num_groups`` / ``moe_router_group_topk``) first picks ``router_group_topk`` of the
  ``router_groups`` contiguous expert groups, then the k experts within them; each pick is taken
  here as uniform (random logits score every group alike).
- ``round_robin``: NeMo AutoModel's ``FakeBalancedGate`` with noise 0 gives token i the experts
  (i x k + j) mod E, j < k: k consecutive experts (nemo_automodel/components/moe/layers.py
  ``FakeBalancedGate.forward``, NVIDIA-NeMo/Automodel @36044ad3), so a token reaches one or two
  neighbouring ranks, nearly always on one node.

Experts sit on the expert-parallel ranks in order (rank r holds experts r x E/ep .. (r+1) x E/ep
- 1: Megatron-Core's local expert indices; AutoModel's expert sharding), and the ranks of the
group fill an NVLink domain before the next (``domain_ranks`` of them). The source rank is any of
the group's with equal chance, so "other" ranks and domains exclude its own one on average.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations
from typing import NamedTuple

from ..models import ROUTINGS

__all__ = ["Destinations", "destinations"]


class Destinations(NamedTuple):
    """The other ranks and the other NVLink domains one token reaches, on average."""

    ranks: float
    domains: float


def destinations(experts: int, top_k: int, ep: int, domain_ranks: int, routing: str = "learned",
                 groups: int = 1, group_topk: int = 1) -> Destinations:
    """The other ranks and other NVLink domains of an *ep*-rank expert group one token's *top_k*
    experts sit on (module docstring), *domain_ranks* of the group's ranks to a domain."""
    d = max(1, min(domain_ranks, ep))
    return Destinations(*_destinations(experts, top_k, ep, d, routing, groups, group_topk))


@lru_cache(maxsize=256)
def _destinations(e: int, k: int, ep: int, d: int, routing: str, g: int,
                  gk: int) -> tuple[float, float]:
    per_rank = e // ep
    domains = -(-ep // d)
    assert routing in ROUTINGS, routing
    if routing == "round_robin":
        starts = {(i * k) % e for i in range(e // math.gcd(e, k))}
        ranks = nodes = 0.0
        for s in starts:
            hit = {((s + j) % e) // per_rank for j in range(k)}
            ranks += len(hit)
            nodes += len({x // d for x in hit})
        ranks, nodes = ranks / len(starts), nodes / len(starts)
    else:
        ranks = sum(_hit(e, k, g, gk, x * per_rank, (x + 1) * per_rank) for x in range(ep))
        nodes = sum(_hit(e, k, g, gk, x * d * per_rank, min(ep, (x + 1) * d) * per_rank)
                    for x in range(domains))
    return ranks * (1 - 1 / ep), nodes * (1 - 1 / domains)


def _hit(e: int, k: int, g: int, gk: int, lo: int, hi: int) -> float:
    """The chance one token has an expert in [lo, hi): k distinct experts at random from the
    experts of gk groups picked at random of g (g = 1: from all)."""
    size = e // g
    pool = gk * size
    # The range's experts in each group it overlaps.
    over = [min(hi, (q + 1) * size) - max(lo, q * size)
            for q in range(lo // size, (hi - 1) // size + 1)]
    miss = 0.0
    total = math.comb(g, gk)
    for j in range(0, min(len(over), gk) + 1):
        rest = math.comb(g - len(over), gk - j) / total   # the other picks outside the range
        if rest == 0.0:
            continue
        for chosen in combinations(over, j):
            miss += rest * math.comb(pool - sum(chosen), k) / math.comb(pool, k)
    return 1.0 - miss
