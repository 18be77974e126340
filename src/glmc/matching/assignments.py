"""Linear assignments: the permutation of B's units (heads, MLP units, residual coordinates) that maximises a
similarity, one at a time or in background threads while the caller forms the next similarity; and the two-level
assignment of grouped-query heads (key/value groups, then query heads inside them)."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import torch

from glmc.symmetry.elements import IndexMap

# One assignment solves while the caller forms the next similarity, and one more waits (as float32): on 2 cores
# GPT-2-124M took as long as with two solving at once (59.9 s against 59.7 s) at a 50 MB lower peak (2.49 GB).
LSA_WORKERS, LSA_QUEUED = 1, 1


class Assignments:
    """Linear assignments solved in background threads (scipy releases the GIL) while the caller computes the next
    similarity; at most `workers` solve and `queued` wait at a time, to bound memory."""

    def __init__(self, workers: int | None = None, queued: int = 0):
        self.workers = workers or max(1, min(4, torch.get_num_threads()))
        self.queued = queued
        # the workers' own torch ops (the float64 cost, the candidate graph) run on one thread each: with the caller's
        # two OpenMP threads beside them, two teams on 2 cores stalled each other (torch's thread count is per thread)
        self.pool = ThreadPoolExecutor(self.workers, initializer=torch.set_num_threads, initargs=(1,))
        self.futures: dict = {}

    def submit(self, key, s: torch.Tensor) -> None:
        waiting = [f for f in self.futures.values() if not f.done()]
        if len(waiting) >= self.workers + self.queued:
            wait(waiting, return_when=FIRST_COMPLETED)
        # a queued job holds the float32 similarity; its worker makes the float64 cost only when it starts
        self.futures[key] = self.pool.submit(_assignment_job, [s], s.shape[1])

    def take_done(self) -> dict:
        """The assignments finished so far and not taken before (key -> IndexMap), without waiting."""
        done = [k for k, f in self.futures.items() if f.done()]
        return {k: self.futures.pop(k).result() for k in done}

    def results(self) -> dict:
        """Every assignment not taken yet, waiting for those still running; the workers then stop."""
        out = {k: f.result() for k, f in self.futures.items()}
        self.futures.clear()
        self.pool.shutdown()
        return out


def assignment(s: torch.Tensor) -> IndexMap:
    """src[h] = j: B's unit j goes to position h, maximising Σ_h s[h, src[h]]."""
    return _assignment_of_cost(_cost(s), s.shape[1])


def _cost(s: torch.Tensor) -> torch.Tensor:
    # the one float64 copy scipy needs, negated in place (maximize=True would make a second); s is not modified
    return s.double().neg_() if s.dtype != torch.float64 else -s


def _assignment_job(holder: list, n: int) -> IndexMap:
    """An assignment of the similarity in `holder`, which is emptied once its float64 cost is made, so the float32
    copy is freed before the solve."""
    return _assignment_of_cost(_cost(holder.pop()), n)


# Square problems of at least this many units are solved on a candidate graph: each row's SPARSE_CANDIDATES
# cheapest entries (decision D16). On random 3072²–5632² similarities, the hard case, one thread solved them 4–8×
# faster (5632²: 2.0 s → 0.24 s) with the dense optimum's assignment every time measured; structured ones, which
# scipy's dense solver finishes in 0.03–0.1 s, cost ~0.06 s more. Below it dense problems take under 0.1 s.
SPARSE_FROM, SPARSE_CANDIDATES = 2048, 64


def _assignment_of_cost(cost: torch.Tensor, n: int) -> IndexMap:
    rows, cols = None, None
    if cost.shape[0] == cost.shape[1] >= SPARSE_FROM:
        rows, cols = _candidate_assignment(cost, SPARSE_CANDIDATES)
    if rows is None:
        from scipy.optimize import linear_sum_assignment  # scipy.optimize: 0.25 s to import, needed here only

        rows, cols = linear_sum_assignment(cost.numpy())
    src = torch.empty(cost.shape[0], dtype=torch.long)
    src[torch.as_tensor(rows, dtype=torch.long)] = torch.as_tensor(cols, dtype=torch.long)
    return IndexMap(src, None, n)


def _candidate_assignment(cost: torch.Tensor, k: int):
    """(rows, cols) of the cheapest perfect matching that uses only each row's k cheapest entries, or (None, None)
    when those admit none (the caller then solves the dense problem). The dense optimum uses almost only such
    entries; on random problems (no structure to find) of the sizes above, none was missed. The gap, if any, is an
    assignment of slightly lower similarity, never a wrong transform: any assignment is a symmetry element."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    n = cost.shape[0]
    k = min(k, n)
    cols = cost.topk(k, dim=1, largest=False, sorted=False).indices.reshape(-1)
    rows = torch.arange(n).repeat_interleave(k)
    weights = cost[rows, cols]
    # the solver reads a stored zero as a missing edge: every kept weight is shifted to at least 1
    weights = weights - weights.min() + 1
    graph = csr_matrix((weights.numpy(), (rows.numpy(), cols.numpy())), shape=(n, n))
    try:
        return min_weight_full_bipartite_matching(graph)
    except ValueError:  # no perfect matching among the candidates
        return None, None


def grouped_assignment(s: torch.Tensor, r: int) -> tuple[IndexMap, IndexMap]:
    """Query-head similarities s [H_a, H_b] → (group permutation, query permutation inside the groups): groups
    of r consecutive heads assigned on the sum over a group pair's best within-group query assignment."""
    g = s.shape[0] // r
    blocks = s.reshape(g, r, g, r).permute(0, 2, 1, 3)  # [group a, group b, query in a, query in b]
    within = {(x, y): assignment(blocks[x, y]) for x in range(g) for y in range(g)}
    score = torch.tensor([[float(blocks[x, y][torch.arange(r), within[x, y].src].sum()) for y in range(g)]
                          for x in range(g)])
    groups = assignment(score)
    # query head j·r + s (after the group move) takes B's query head src·r + t: within the moved block, s ← t
    src = torch.cat([within[x, int(groups.src[x])].src + x * r for x in range(g)])
    return groups, IndexMap(src, None, g * r)


