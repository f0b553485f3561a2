"""Where a token's experts land (sim.workload.routing): the exact counts against a sampled
router, AutoModel's fake gate against its own rule, and the DeepEP bytes that follow."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.workload.ops import Comm
from sim.workload.routing import destinations
from sim.workload.transformer import build_workload


def _sampled(e: int, k: int, ep: int, d: int, g: int, gk: int, n: int = 20000) -> tuple[float, float]:
    """A router drawn at random: gk of g groups, then k distinct experts within them; the source
    rank uniform. Counts the other ranks and other domains each token reaches."""
    rng = np.random.default_rng(7)
    per_rank, size = e // ep, e // g
    ranks = nodes = 0
    for _ in range(n):
        chosen = rng.choice(g, gk, replace=False)
        pool = np.concatenate([np.arange(q * size, (q + 1) * size) for q in chosen])
        picks = rng.choice(pool, k, replace=False)
        src = rng.integers(ep)
        hit = set((picks // per_rank).tolist())
        ranks += len(hit - {src})
        nodes += len({x // d for x in hit} - {src // d})
    return ranks / n, nodes / n


@pytest.mark.parametrize("e,k,ep,d,g,gk", [
    (256, 8, 64, 8, 8, 4),       # DeepSeek-V3 on 8 nodes: node-limited to 4
    (256, 8, 32, 8, 8, 4),       # two groups a node
    (128, 8, 16, 8, 1, 1),       # Qwen3-30B on 2 nodes
    (128, 4, 64, 8, 1, 1),       # gpt-oss-120b
    (384, 8, 32, 8, 1, 1),       # Kimi K2
    (64, 6, 8, 8, 1, 1),         # one domain
])
def test_exact_counts_match_a_sampled_router(e, k, ep, d, g, gk) -> None:
    exact = destinations(e, k, ep, d, "learned", g, gk)
    ranks, nodes = _sampled(e, k, ep, d, g, gk)
    assert exact.ranks == pytest.approx(ranks, abs=0.05)
    assert exact.domains == pytest.approx(nodes, abs=0.04)


def test_group_limit_caps_the_domains_a_token_reaches() -> None:
    free = destinations(256, 8, 64, 8)
    limited = destinations(256, 8, 64, 8, "learned", 8, 4)
    # at most 4 groups, one a node here, and half the time one is the source's own
    assert limited.domains < 3.5 < free.domains


def test_round_robin_is_automodels_fake_gate() -> None:
    # FakeBalancedGate: token i's experts (i * k + j) mod E
    e, k, ep, d = 256, 8, 64, 8
    ranks = nodes = 0.0
    tokens = 4096
    for i in range(tokens):
        hit = {((i * k + j) % e) // (e // ep) for j in range(k)}
        for src in range(ep):
            ranks += len(hit - {src})
            nodes += len({x // d for x in hit} - {src // d})
    got = destinations(e, k, ep, d, "round_robin")
    assert got.ranks == pytest.approx(ranks / tokens / ep)
    assert got.domains == pytest.approx(nodes / tokens / ep)
    assert got.domains == pytest.approx(7 / 8)                   # one node, the source's 1/8


def _ep_bytes(model: dict, chips: int, ep: int) -> int:
    s = scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": chips},
                            "model": model, "parallelism": {"ep": ep},
                            "software": {"moe_dispatcher": "deepep"},
                            "training": {"global_batch": chips}}, "t.yaml")
    wl = build_workload(s)
    return sum(c.size_bytes for c in wl.layer.forward if isinstance(c, Comm) and c.group == "ep")


def test_deepep_moves_fewer_bytes_for_a_gate_that_keeps_tokens_together() -> None:
    learned = _ep_bytes({"preset": "deepseek-v3", "moe": {"load_imbalance": 1.0}}, 64, 64)
    fake = _ep_bytes({"preset": "deepseek-v3", "moe": {"load_imbalance": 1.0,
                                                       "routing": "round_robin"}}, 64, 64)
    ratio = (destinations(256, 8, 64, 8, "round_robin").domains
             / destinations(256, 8, 64, 8, "learned", 8, 4).domains)
    assert fake / learned == pytest.approx(ratio, rel=1e-3)


def test_bad_routing_is_one_line() -> None:
    def bad(moe: dict) -> str:
        with pytest.raises(ConfigError) as e:
            scenario_from_dict({"cluster": {"topology": "dgx-h100", "chips": 8},
                                "model": {"preset": "deepseek-v3", "moe": moe}}, "t.yaml")
        assert "\n" not in str(e.value)
        return str(e.value)
    assert "model.moe.routing" in bad({"routing": "random"})
    assert "router_groups: 7 does not divide experts = 256" in bad({"router_groups": 7})
    assert "router_group_topk: 1 of 64 groups of 4 experts cannot hold top_k = 8" in bad(
        {"router_groups": 64, "router_group_topk": 1})
