"""Leave one step out: the replay asked to predict a step it did not see (docs/analysis.md,
"Validation").

The unmodified replay reproduces every measured step by construction (each node keeps its
measured time, each lag its measured lag). To test it as a model, each replayed step in
turn is held out: its nodes take the times their kind of node took in the *other* steps
(``fit``: per lane, the median cost and lane gap of the nodes at the same place in the
other steps, else of the same op between the same neighbours -- host time belongs to the op
it precedes and follows --, else of the same op, of the same kind, of the lane), its
cross-lane edges the median lag of the same kind of edge into the same place (``_fit_lags``),
and the graph is replayed. The prediction is the held-out step's replayed time; the baseline it must
beat is the median of the other steps' measured times. Where the steps run the same ops in
the same order the model's times are the per-place medians of the other steps: it can beat
the baseline only where the steps' time lies in what differs between them (a recompile, a
data wait), not where a random stall strikes (it predicts the step without it).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .sim import simulate

# from the most specific to the least: the same place in its step (the n-th node of its lane
# in the step, same name: a loop runs the same ops in the same order), the same op between
# the same neighbours (what it follows and precedes), the same op, the same kind of node
KEYS = (("lane", "place", "name"), ("lane", "kind", "cat", "name", "prev", "next"),
        ("lane", "kind", "cat", "name"), ("lane", "kind", "cat"), ("lane",))


def _keyed(nodes: pd.DataFrame) -> pd.DataFrame:
    """The key columns of ``KEYS`` per node (names as strings)."""
    o = np.lexsort((nodes["seq"].to_numpy(), nodes["step"].to_numpy(), nodes["lane"].to_numpy()))
    lane, step = nodes["lane"].to_numpy()[o], nodes["step"].to_numpy()[o]
    name = nodes["name"].astype(str).to_numpy()[o]
    first = np.r_[True, (lane[1:] != lane[:-1]) | (step[1:] != step[:-1])]
    start = np.maximum.accumulate(np.where(first, np.arange(len(o)), 0))
    same_prev = np.r_[False, lane[1:] == lane[:-1]]
    same_next = np.r_[lane[:-1] == lane[1:], False]
    blank = np.array([""], object)
    name = name.astype(object)
    cols = {"place": np.arange(len(o)) - start,
            "prev": np.where(same_prev, np.concatenate([blank, name[:-1]]), ""),
            "next": np.where(same_next, np.concatenate([name[1:], blank]), "")}
    out = pd.DataFrame({"lane": nodes["lane"].to_numpy(),
                        "kind": nodes["kind"].astype(str).to_numpy(),
                        "cat": nodes["cat"].astype(str).to_numpy(),
                        "name": nodes["name"].astype(str).to_numpy()})
    for c, v in cols.items():
        back = np.empty(len(o), dtype=v.dtype)
        back[o] = v
        out[c] = back
    return out


def fit(nodes: pd.DataFrame, train: np.ndarray, col: str, keyed=None) -> np.ndarray:
    """Per node, the median ``col`` of the training nodes that share its most specific key
    (``KEYS``, in order); the node's own value where no training node shares any."""
    keyed = _keyed(nodes) if keyed is None else keyed
    out = nodes[col].to_numpy(np.float64).copy()
    done = np.zeros(len(nodes), bool)
    v = nodes[col].to_numpy(np.float64)
    for key in KEYS:
        frame = keyed[list(key)].copy()
        frame["v"] = v
        med = frame[train].groupby(list(key))["v"].median()
        idx = pd.MultiIndex.from_frame(frame[list(key)]) if len(key) > 1 else \
            pd.Index(frame[key[0]])
        got = med.reindex(idx).to_numpy()
        take = ~done & np.isfinite(got)
        out[take] = got[take]
        done |= take
    return np.rint(out).astype(np.int64)


def held_out(graph, index: int):
    """``graph`` with step ``index``'s nodes and the edges into them fitted on the other
    steps (``fit``); None where no other step is there to learn from."""
    n = graph.nodes
    step = n["step"].to_numpy()
    test = step == index
    train = (step >= 0) & ~test
    if not train.any() or not test.any():
        return None
    g = graph.copy()
    keyed = _keyed(n)
    fitted = test
    for col in ("cost_ns", "gap_ns"):
        v = g.nodes[col].to_numpy(np.int64).copy()
        v[fitted] = fit(n, train, col, keyed)[fitted]
        g.nodes[col] = v
    g.nodes["dur_ns"] = g.nodes["cost_ns"]
    e = g.edges
    if len(e):
        pos = pd.Index(n["id"].to_numpy())
        d = pos.get_indexer(e["dst"].to_numpy())
        into = (d >= 0) & fitted[np.maximum(d, 0)]
        learn = (d >= 0) & train[np.maximum(d, 0)]
        e["lag_ns"] = _fit_lags(e, keyed, d, into, learn)
    return g


def _fit_lags(e: pd.DataFrame, keyed: pd.DataFrame, d: np.ndarray, into: np.ndarray,
              learn: np.ndarray) -> np.ndarray:
    """The lags of the edges ``into`` the held-out step: the median lag of the training
    edges of the same kind into the node at the same place (a pageable copy's launch lag is
    -8 ms, a kernel's +5 us: a lag belongs to its edge's ends), else into the same op,
    else of the same kind; the measured lag where none was learnt."""
    lag = e["lag_ns"].to_numpy(np.int64).copy()
    dk = keyed.iloc[np.maximum(d, 0)].reset_index(drop=True)
    frame = pd.DataFrame({"kind": e["kind"].astype(str).to_numpy(), "lane": dk["lane"],
                          "place": dk["place"], "name": dk["name"], "v": lag.astype(float)})
    done = ~into
    for key in (("kind", "lane", "place", "name"), ("kind", "name"), ("kind",)):
        med = frame[learn].groupby(list(key))["v"].median()
        idx = pd.MultiIndex.from_frame(frame[list(key)]) if len(key) > 1 else \
            pd.Index(frame[key[0]])
        got = med.reindex(idx).to_numpy()
        take = ~done & np.isfinite(got)
        lag[take] = np.rint(got[take]).astype(np.int64)
        done |= take
    return lag


def leave_one_out(graph) -> list[dict]:
    """Per replayed step: {step, measured_ns, predicted_ns (None: the replay did not
    settle), baseline_ns (the median of the other steps' measured times)}."""
    st = graph.steps
    if len(st) < 2:
        return []
    meas = st["dur_ns"].to_numpy(np.int64)
    out = []
    for i, (index, step) in enumerate(zip(st["index"].to_numpy(), st["step"].to_numpy())):
        g = held_out(graph, int(index))
        if g is None:
            continue
        s = simulate(g)
        rep = s.steps["replayed_ns"].to_numpy(np.int64)
        mine = s.steps["index"].to_numpy() == index
        pred = int(rep[mine][0]) if s.converged and mine.any() and rep[mine][0] >= 0 \
            else None
        others = np.delete(meas, i)
        out.append({"step": int(step), "measured_ns": int(meas[i]),
                    "predicted_ns": pred if pred is None or pred >= 0 else None,
                    "baseline_ns": int(np.median(others))})
    return out


def score(rows: list[dict]) -> dict | None:
    """{replay_error_pct, baseline_error_pct (medians of |error| over the held-out steps),
    beats_baseline} for ``leave_one_out`` rows; None without a prediction."""
    ok = [r for r in rows if r["predicted_ns"] is not None and r["measured_ns"] > 0]
    if not ok:
        return None
    rep = [abs(r["predicted_ns"] - r["measured_ns"]) / r["measured_ns"] for r in ok]
    base = [abs(r["baseline_ns"] - r["measured_ns"]) / r["measured_ns"] for r in ok]
    return {"steps": len(ok), "replay_error_pct": round(100 * float(np.median(rep)), 2),
            "baseline_error_pct": round(100 * float(np.median(base)), 2),
            "beats_baseline": bool(np.median(rep) < np.median(base))}
