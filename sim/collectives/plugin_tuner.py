"""A net plugin's own tuner: AWS's aws-ofi-nccl region tables for its EC2 platforms.

From NCCL 2.19 a tuner plugin may choose the algorithm and protocol of each call. aws-ofi-nccl's
does on the platforms it knows: for each collective and each ranks-per-node layout it holds
polygons in the (message bytes, ranks) plane, both axes log2, each naming the (algorithm,
protocol) AWS measured fastest inside it; the first polygon that holds a call's point (its edge
included) picks, and a call outside every polygon, or a layout without a table, is left to
NCCL's own tuner. Some polygons end at a vertex extended from two others towards the table's
far corner (100 GiB, 2^20 ranks): along the line through them in log2 space to whichever of
the corner's two bounds it meets first, or straight across when the two share a coordinate.

The vertex tables are AWS's, read from aws/aws-ofi-nccl ``src/tuner/nccl_ofi_regions.cpp``
(``region_init_internal_p5_p5e``: P5/P5e, H100/H200 with 8 x 400 Gb/s of EFA per node;
``region_init_internal_p6``: P6-B200) and its limits from ``include/tuner/nccl_ofi_tuner_region.h``
(``TUNER_MAX_SIZE`` 100 GiB, ``TUNER_MAX_RANKS`` 2^20; a zero coordinate is taken as 1e-6
before the log). Transcribed as data; the geometry is written here. Only the whole-node (8 GPUs
a node) and one-GPU-a-node layouts are carried; other layouts fall to NCCL's tuner, as they do
where AWS has no table.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

__all__ = ["PLATFORMS", "plugin_choice"]

MAX_SIZE = 100.0 * 1024 ** 3
MAX_RANKS = 1024.0 * 1024
_EPS = 1e-6

# A vertex is (bytes, ranks); ("x", a, b), the extension of the line through a and b;
# ("ranks of", e, bytes), the point at *bytes* with extension e's ranks; ("bytes of", e, ranks),
# the point at *ranks* with e's bytes.
Vertex = tuple[Any, ...]
Region = tuple[str, str, tuple[Vertex, ...]]


def _x(a: tuple[float, float], b: tuple[float, float]) -> Vertex:
    return ("x", a, b)


_M, _R = MAX_SIZE, MAX_RANKS

# P5 / P5e, all-reduce, 8 ranks a node
_P5_TREE_LL128 = _x((402653184, 2048), (402653184, 4096))
_P5_NVLST = _x((8053063680, 160), (9663676416, 192))
_P5_AR_8: tuple[Region, ...] = (
    ("tree", "LL128", ((0, 16), (31457280, 16), (37748736, 32), (117440512, 64), (301989888, 128),
                       (301989888, 256), (335544320, 512), (536870912, 1024), (402653184, 2048),
                       (402653184, 4096), _P5_TREE_LL128, ("ranks of", _P5_TREE_LL128, 0))),
    ("nvls_tree", "Simple", ((31457281, 16), (_M, 16), (31457281, 16))),
    ("ring", "LL128", ((31457280, 17), (1073741824, 17), (2147483648, 64), (2147483648, 128),
                       (1342177280, 160), (2147483648, 256), (1074790400, 256), (444596224, 160),
                       (301989888, 128), (117440512, 64), (37748736, 32))),
    ("nvls_tree", "Simple", ((2147483648, 128), (6442450944, 128), (8053063680, 160),
                             (9663676416, 192), _P5_NVLST, _P5_TREE_LL128, (402653184, 4096),
                             (402653184, 2048), (536870912, 1024), (335544320, 512),
                             (301989888, 256), (310378496, 160), (444596224, 160),
                             (1074790400, 256), (2684354560, 256), (2147483648, 224),
                             (1342177280, 160))),
    ("ring", "Simple", ((1073741824, 17), ("bytes of", _P5_NVLST, 17), _P5_NVLST, (9663676416, 192),
                        (8053063680, 160), (2684354560, 64), (1610612736, 32))),
)
# P5 / P5e, one rank a node
_P5_1_TREE_LL128 = _x((9999360, 64), (119477248, 128))
_P5_1_RING_LL128 = _x((4736000, 2), (269484032, 128))
_P5_AR_1: tuple[Region, ...] = (
    ("tree", "LL128", ((0, 16), (2367488, 16), (9999360, 64), (119477248, 128), _P5_1_TREE_LL128,
                       (0, _R))),
    ("ring", "LL128", ((0, 2), (4736000, 2), (269484032, 128), _P5_1_RING_LL128, _P5_1_TREE_LL128,
                       (119477248, 128), (9999360, 64), (2367488, 16), (0, 16))),
    ("ring", "Simple", ((4736000, 2), (_M, 2), _P5_1_RING_LL128, (269484032, 128))),
)
_P5_AG_1_EXT = _x((4194304, 2), (8589934592, 2048))
_P5_AG_1: tuple[Region, ...] = (
    ("ring", "Simple", ((4194304, 2), (_M, 2), _P5_AG_1_EXT, (8589934592, 2048))),)
_P5_RS_1_EXT = _x((8388608, 2), (4294967296, 1024))
_P5_RS_1: tuple[Region, ...] = (
    ("ring", "Simple", ((8388608, 2), (_M, 2), _P5_RS_1_EXT, (4294967296, 1024))),)

# P6-B200, 8 ranks a node
_P6_TREE_LL = _x((393216, 16), (393216, 1024))
_P6_TREE_LL128 = _x((96993280, 1024), (106430464, 2048))
_P6_NVLST = _x((10737418240, 512), (34359738368, 1500))
_P6_AR_8: tuple[Region, ...] = (
    ("tree", "LL", ((0, 16), (393216, 16), _P6_TREE_LL, (0, _R))),
    ("tree", "LL128", (_P6_TREE_LL, (393216, 16), (4718592, 16), (18350080, 32), (40370176, 64),
                       (57147392, 128), (72876032, 256), (96993280, 1024), (106430464, 2048),
                       _P6_TREE_LL128)),
    ("ring", "LL128", ((90701824, 128), (50855936, 64), (18350080, 32), (133693440, 32),
                       (120061952, 64))),
    ("nvls_tree", "Simple", (_P6_TREE_LL128, (106430464, 2048), (96993280, 1024), (72876032, 256),
                             (57147392, 128), (40370176, 64), (18350080, 32), (50855936, 64),
                             (90701824, 128), (120061952, 64), (133693440, 32), (18350080, 32),
                             (4718592, 16), (_M, 16), (435159040, 32), (1072693248, 64),
                             (10737418240, 512), (34359738368, 1500), _P6_NVLST)),
    ("ring", "Simple", (_P6_NVLST, (10737418240, 512), (1072693248, 64), (435159040, 32),
                        (_M, 16))),
)
_P6_AG_LL = _x((74973184, 1024), (213385216, 2048))
_P6_AG_LL128 = _x((8321499136, 512), (32212254720, 2048))
_P6_AG_8: tuple[Region, ...] = (
    ("ring", "LL", ((0, 16), (786432, 16), (1572864, 32), (2621440, 64), (4718592, 128),
                    (17301504, 256), (74973184, 1024), (213385216, 2048), _P6_AG_LL, (0, _R))),
    ("ring", "LL128", (_P6_AG_LL, (213385216, 2048), (74973184, 1024), (17301504, 256),
                       (4718592, 128), (2621440, 64), (1572864, 32), (786432, 16),
                       (198705152, 16), (456130560, 32), (871366656, 64), (8321499136, 512),
                       (32212254720, 2048), _P6_AG_LL128)),
    ("ring", "Simple", (_P6_AG_LL128, (32212254720, 2048), (8321499136, 512), (871366656, 64),
                        (456130560, 32), (198705152, 16), (_M, 16))),
)
_P6_RS_LL = _x((73924608, 1024), (209190912, 2048))
_P6_RS_LL128 = _x((4294967296, 256), (8589934592, 512))
_P6_RS_8: tuple[Region, ...] = (
    ("ring", "LL", ((0, 16), (786432, 16), (1572864, 32), (2621440, 64), (4718592, 128),
                    (17301504, 256), (35127296, 512), (73924608, 1024), (209190912, 2048),
                    _P6_RS_LL, (0, _R))),
    ("ring", "LL128", (_P6_RS_LL, (209190912, 2048), (73924608, 1024), (35127296, 512),
                       (17301504, 256), (4718592, 128), (2621440, 64), (1572864, 32),
                       (786432, 16), (219676672, 16), (508559360, 32), (592445440, 64),
                       (4294967296, 256), (8589934592, 512), _P6_RS_LL128)),
    ("ring", "Simple", (_P6_RS_LL128, (8589934592, 512), (4294967296, 256), (592445440, 64),
                        (508559360, 32), (219676672, 16), (_M, 16))),
)

# platform -> (op, ranks per node) -> regions, in the order the plugin tries them
PLATFORMS: dict[str, dict[tuple[str, int], tuple[Region, ...]]] = {
    "aws-p5": {("allreduce", 8): _P5_AR_8, ("allreduce", 1): _P5_AR_1,
               ("allgather", 1): _P5_AG_1, ("reducescatter", 1): _P5_RS_1},
    "aws-p6": {("allreduce", 8): _P6_AR_8, ("allgather", 8): _P6_AG_8,
               ("reducescatter", 8): _P6_RS_8},
}


def _log2(p: tuple[float, float]) -> tuple[float, float]:
    return (math.log2(p[0] if p[0] > 0 else _EPS), math.log2(p[1] if p[1] > 0 else _EPS))


def _extend(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """The point, in log2 space, where the line through *a* and *b* meets the far corner's
    bounds (x = log2 MAX_SIZE or y = log2 MAX_RANKS, whichever it meets first)."""
    (ax, ay), (bx, by) = _log2(a), _log2(b)
    zx, zy = _log2((MAX_SIZE, MAX_RANKS))
    if ax == bx:
        return ax, zy
    if ay == by:
        return zx, ay
    m = (ay - by) / (ax - bx)
    c = by - m * bx
    y_at_zx = m * zx + c
    return (zx, y_at_zx) if y_at_zx < zy else ((zy - c) / m, zy)


def _vertex(v: Vertex) -> tuple[float, float]:
    """A vertex in log2 space."""
    tag = v[0]
    if tag == "x":
        return _extend(v[1], v[2])
    if tag == "ranks of":
        return _log2((v[2], 1))[0], _vertex(v[1])[1]
    if tag == "bytes of":
        return _vertex(v[1])[0], math.log2(v[2])
    return _log2((float(v[0]), float(v[1])))


@lru_cache(maxsize=None)
def _polygon(platform: str, op: str, ppn: int, i: int) -> tuple[tuple[float, float], ...]:
    return tuple(_vertex(v) for v in PLATFORMS[platform][(op, ppn)][i][2])


def _on_segment(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> bool:
    (px, py), (ax, ay), (bx, by) = p, a, b
    cross = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
    scale = max(1.0, abs(bx - ax) + abs(by - ay))
    if abs(cross) > 1e-9 * scale:
        return False
    return min(ax, bx) - 1e-9 <= px <= max(ax, bx) + 1e-9 and min(ay, by) - 1e-9 <= py <= max(ay, by) + 1e-9


def _inside(p: tuple[float, float], poly: tuple[tuple[float, float], ...]) -> bool:
    """Inside the polygon or on its edge (even-odd rule, a ray towards +x)."""
    n = len(poly)
    if any(_on_segment(p, poly[k], poly[(k + 1) % n]) for k in range(n)):
        return True
    px, py = p
    inside = False
    for k in range(n):
        (ax, ay), (bx, by) = poly[k], poly[(k + 1) % n]
        if (ay > py) != (by > py) and px < ax + (py - ay) * (bx - ax) / (by - ay):
            inside = not inside
    return inside


def plugin_choice(platform: str, op: str, size: int, ranks: int, nodes: int) -> tuple[str, str] | None:
    """The (algorithm, protocol) *platform*'s plugin tuner picks for one call, or None where it
    leaves the call to NCCL (no table for the layout, a point outside its regions, beyond its
    limits)."""
    if nodes < 1 or ranks % nodes or size > MAX_SIZE or ranks > MAX_RANKS:
        return None
    table = PLATFORMS.get(platform, {})
    ppn = ranks // nodes
    if (op, ppn) not in table:
        return None
    p = _log2((float(size), float(ranks)))
    for i, (algo, proto, _) in enumerate(table[(op, ppn)]):
        if _inside(p, _polygon(platform, op, ppn, i)):
            return algo, proto
    return None
