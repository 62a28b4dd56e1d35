"""Leave one step out: the replay asked to predict a step it did not see (docs/analysis.md,
"Validation").

The unmodified replay reproduces every measured step by construction (each node keeps its
measured time, each lag its measured lag). To test it as a model, each replayed step in
turn is held out and predicted from its *graph* -- which work it ran: its ops, kernels,
copies, host stretches and their dependencies -- and the times the other steps measured.
It never reads the held-out step's own times: every node's cost and lane gap and every lag
into it are replaced by what was learnt elsewhere.

* **Which steps to learn from** (``alike``): the other steps whose work is most like the
  held-out step's (per lane, how many nodes of each kind and name it ran): those within
  ``ALIKE_SHARE`` of its node count of the nearest one. A step that recompiles, waits for
  data, or runs a different number of kernels learns from the steps that did the same; a
  loop of identical steps learns from all of them.
* **Which node is which** (``fit``, ``KEYS``): a node takes the median cost and lane gap of
  the training nodes that share its most specific key: the n-th time its op ran on its lane
  in the step; else the n-th node of its lane in the step with the same name; else the same
  op between the same neighbours (host time belongs to the op it precedes and follows);
  the same op; the same kind of node on the lane; the same kind anywhere.
* **Lags** (``_fit_lags``): the median lag of the same kind of edge into the same node (its
  n-th run, its place), else into the same op, else of the same kind; 0 where none was
  learnt.

The prediction is the held-out step's replayed *program step* (``critical.program_spans``:
the longer of the host's span and the GPU's window for the step, the step the program waits
on); the baseline it must beat is the median of the other steps' measured program steps.
Where the steps run the same work the model's times are per-node medians of the other
steps, and it ties the baseline at best: it beats it where the steps' time lies in what
differs between them (a recompile, a data wait, an odd step's extra work), not where a
random stall strikes (it predicts the step without it).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .critical import program_spans
from .sim import simulate

# from the most specific to the least: the n-th run of the op between the same neighbours on
# its lane in the step, the same place in its step (the n-th node of its lane, same name),
# a host stretch at the same place between the same neighbours whatever its name (a stretch
# is named by the op at its middle, which moves: gpu/graphs.fixed's 160-260 us before the
# compiled region's first launch reads `AOTDispatcher Runtime Wrapper Prologue` in two steps,
# `Torch-Compiled Region: 0/0` in the third, whose 10 us piece it was given), the n-th run
# of the op on its lane, the same op between the same neighbours (host time
# belongs to the op it follows and precedes), the same op, the same kind of node on the
# lane, the lane, the same kind of node anywhere
KEYS = (("lane", "name", "prev", "next", "nth3"), ("lane", "place", "name"),
        ("lane", "hplace", "prev", "next"), ("lane", "name", "nth"),
        ("lane", "kind", "cat", "name", "prev", "next"), ("lane", "kind", "cat", "name"),
        ("lane", "kind", "cat"), ("lane",), ("kind", "cat"), ("kind",))
LAG_KEYS = (("kind", "lane", "name", "prev", "next", "nth3"), ("kind", "lane", "place", "name"),
            ("kind", "name"), ("kind",))
# a training step is like the held-out one when its work differs from it by at most this
# share of the held-out step's nodes more than the nearest step's does
ALIKE_SHARE = 0.1
# fewer steps than this: the baseline is one other step, the model that step replayed
MIN_STEPS = 3
# the replay and the baseline tie when their median errors differ by at most this (points)
TIE_PTS = 0.01


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
    prev = np.where(same_prev, np.concatenate([blank, name[:-1]]), "")
    nxt = np.where(same_next, np.concatenate([name[1:], blank]), "")
    # the n-th run of the same name on the lane within the step; and of the same name
    # between the same neighbours (an extra op elsewhere in the step shifts neither)
    f = pd.DataFrame({"l": lane, "s": step, "n": name, "p": prev, "x": nxt})
    nth = f.groupby(["l", "s", "n"], sort=False).cumcount().to_numpy()
    nth3 = f.groupby(["l", "s", "n", "p", "x"], sort=False).cumcount().to_numpy()
    place = np.arange(len(o)) - start
    host = nodes["kind"].astype(str).to_numpy()[o] == "host"
    cols = {"place": place, "hplace": np.where(host, place, -1 - np.arange(len(o))),
            "nth": nth, "nth3": nth3, "prev": prev, "next": nxt}
    out = pd.DataFrame({"lane": nodes["lane"].to_numpy(),
                        "kind": nodes["kind"].astype(str).to_numpy(),
                        "cat": nodes["cat"].astype(str).to_numpy(),
                        "name": nodes["name"].astype(str).to_numpy()})
    for c, v in cols.items():
        back = np.empty(len(o), dtype=v.dtype)
        back[o] = v
        out[c] = back
    return out


def _groups(frame: pd.DataFrame, keys) -> list[np.ndarray]:
    """Per key of ``keys``, each row's group: an int code shared by the rows that agree on
    every column of the key (computed once per graph, reused for every held-out step)."""
    codes = {c: pd.factorize(frame[c])[0].astype(np.int64) for k in keys for c in k}
    out = []
    for key in keys:
        g = codes[key[0]]
        for c in key[1:]:
            g = pd.factorize(g * (int(codes[c].max(initial=0)) + 1) + codes[c])[0]
        out.append(np.asarray(g, np.int64))
    return out


def _estimate(groups: list[np.ndarray], v: np.ndarray, learn: np.ndarray,
              todo: np.ndarray) -> np.ndarray:
    """Per ``todo`` row, the trimmed mean (``_trimmed``) of ``v`` over the ``learn`` rows in
    its group of the most specific key (``groups`` in order); NaN where none shares any."""
    out = np.full(len(v), np.nan)
    done = ~todo
    for g in groups:
        if done.all():
            break
        est = _trimmed(g[learn], v[learn], int(g.max(initial=-1)) + 1)
        got = est[g]
        take = ~done & np.isfinite(got)
        out[take] = got[take]
        done |= take
    return out


def _trimmed(g: np.ndarray, v: np.ndarray, size: int) -> np.ndarray:
    """Per group, the mean of its values without the lowest and the highest one (the
    median of three; the mean of one or two; NaN for none): a node's time summed over a
    step is its mean, and a stall that struck one training step is dropped."""
    cnt = np.bincount(g, minlength=size).astype(np.float64)
    tot = np.bincount(g, weights=v, minlength=size)
    hi = np.full(size, -np.inf)
    lo = np.full(size, np.inf)
    np.maximum.at(hi, g, v)
    np.minimum.at(lo, g, v)
    trim = cnt >= 3
    tot = tot - np.where(trim, np.where(trim, hi, 0.0) + np.where(trim, lo, 0.0), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.where(trim, cnt - 2, cnt), np.nan)


class _Fit:
    """What the fit reads of one graph, computed once: the nodes' keys and groups
    (``KEYS``), each edge's destination and its groups (``LAG_KEYS``)."""

    def __init__(self, graph):
        n = graph.nodes
        self.keyed = _keyed(n)
        self.node_groups = _groups(self.keyed, KEYS)
        e = graph.edges
        self.dst = pd.Index(n["id"].to_numpy()).get_indexer(e["dst"].to_numpy()) \
            if len(e) else np.zeros(0, np.int64)
        dk = self.keyed.iloc[np.maximum(self.dst, 0)].reset_index(drop=True)
        frame = dk.assign(kind=e["kind"].astype(str).to_numpy())
        self.edge_groups = _groups(frame, LAG_KEYS) if len(e) else []


def fit(nodes: pd.DataFrame, train: np.ndarray, col: str, keyed=None,
        test: np.ndarray | None = None, groups=None) -> np.ndarray:
    """Per node of ``test`` (default: every node), the trimmed mean ``col`` of the
    ``train`` nodes that share its most specific key (``KEYS``, in order); 0 where none
    shares any (never the node's own value); the other nodes keep theirs."""
    if groups is None:
        groups = _groups(_keyed(nodes) if keyed is None else keyed, KEYS)
    test = np.ones(len(nodes), bool) if test is None else test
    own = nodes[col].to_numpy(np.float64)
    got = _estimate(groups, own, train, test)
    out = np.where(test, np.nan_to_num(got, nan=0.0), own)
    return np.rint(out).astype(np.int64)


def signature(graph, col: str | None = None) -> pd.DataFrame:
    """Per replayed step (rows, by graph step index) the work it ran: how many nodes of each
    (lane, kind, name) (columns); with ``col`` (``cost_ns``) their time instead."""
    n = graph.nodes
    step = n["step"].to_numpy()
    m = step >= 0
    key = pd.Series(n["lane"].astype(str).to_numpy()[m] + "\x1f" +
                    n["kind"].astype(str).to_numpy()[m] + "\x1f" +
                    n["name"].astype(str).to_numpy()[m])
    code, uniq = pd.factorize(key)
    k = len(graph.steps)
    v = np.ones(int(m.sum()), np.int64) if col is None else n[col].to_numpy(np.int64)[m]
    out = np.zeros((k, len(uniq)), np.int64)
    np.add.at(out, (step[m], code), v)
    return pd.DataFrame(out, columns=list(uniq))


# work one step ran and another did not, at this share of either step's time or more, makes
# them different steps (as the verdict's 1%: under it, no lever)
OTHER_WORK_SHARE = 0.01


def alike(sig: pd.DataFrame, index: int, ns: pd.DataFrame | None = None) -> np.ndarray:
    """The steps (bool over ``sig``'s rows) to learn step ``index`` from: the others whose
    work differs from its own (L1 distance of their ``signature`` rows) by at most
    ``ALIKE_SHARE`` of its node count more than the nearest other step's does. With ``ns``
    (``signature(graph, "cost_ns")``), among the steps that ran no other kind of work than
    it did (a call, a GPU op, a data-loading or collective stretch only one of the two ran,
    taking ``OTHER_WORK_SHARE`` of that step's time or more), where any did -- not a host
    stretch's name: a stretch is named by the op at its middle, which moves where a cut
    falls (gpu/sync.bad: ``aten::linear`` in one step, ``aten::_to_copy`` in the next, the
    same work): pairs/persist.after's first step of an epoch runs the
    DataLoader's ``__iter__`` (0.5-0.6 ms, 4% of its 13.7 ms), then waits 11 ms for the
    workers' first batch; the other steps (1.9-7.0 ms) learnt that wait from it."""
    m = sig.to_numpy()
    d = np.abs(m - m[index]).sum(axis=1).astype(float)
    others = np.arange(len(m)) != index
    if not others.any():
        return others
    pool = others
    if ns is not None:
        t = ns.to_numpy().astype(float)
        work = np.array([str(c).split("\x1f")[1] != "host" for c in ns.columns])
        own = ((m > 0) != (m[index] > 0)) & work     # work one of the two ran alone
        total = np.maximum(t.sum(axis=1), 1.0)
        theirs = (t * own).sum(axis=1) / total
        mine = (own * t[index]).sum(axis=1) / total[index]
        same = others & (np.maximum(theirs, mine) < OTHER_WORK_SHARE)
        pool = same if same.any() else others
    room = ALIKE_SHARE * max(int(m[index].sum()), 1)
    return pool & (d <= d[pool].min() + room)


def held_out(graph, index: int, sig: pd.DataFrame | None = None, fitting: _Fit | None = None,
             ns: pd.DataFrame | None = None):
    """``graph`` with step ``index``'s nodes and the edges into them fitted on the steps
    like it (``alike``, ``fit``); None where no other step is there to learn from."""
    n = graph.nodes
    step = n["step"].to_numpy()
    test = step == index
    if sig is None:
        sig, ns = signature(graph), signature(graph, "cost_ns")
    steps = alike(sig, index, ns) if 0 <= index < len(sig) else np.zeros(0, bool)
    train = (step >= 0) & ~test & np.isin(step, np.flatnonzero(steps))
    if not train.any() or not test.any():
        return None
    g = graph.copy()
    f = _Fit(graph) if fitting is None else fitting
    for col in ("cost_ns", "gap_ns"):
        g.nodes[col] = fit(n, train, col, test=test, groups=f.node_groups)
    g.nodes["dur_ns"] = g.nodes["cost_ns"]
    e = g.edges
    if len(e):
        d = f.dst
        into = (d >= 0) & test[np.maximum(d, 0)]
        learn = (d >= 0) & train[np.maximum(d, 0)]
        e["lag_ns"] = _fit_lags(e, f.edge_groups, into, learn)
    return g


def _fit_lags(e: pd.DataFrame, groups: list, into: np.ndarray,
              learn: np.ndarray) -> np.ndarray:
    """The lags of the edges ``into`` the held-out step: the trimmed mean lag of the
    training edges of the same kind into the same node (a pageable copy's launch lag is
    -8 ms, a kernel's +5 us: a lag belongs to its edge's ends), else into the same op, else
    of the same kind (``LAG_KEYS``); 0 where none was learnt."""
    lag = e["lag_ns"].to_numpy(np.int64).copy()
    got = _estimate(groups, lag.astype(np.float64), learn, into)
    lag[into] = np.rint(np.nan_to_num(got[into], nan=0.0)).astype(np.int64)
    return lag


def leave_one_out(graph) -> list[dict]:
    """Per replayed step: {step, measured_ns (its program step), predicted_ns (None: the
    replay did not settle), baseline_ns (the median of the other steps' program steps),
    learnt_from (how many other steps were like it)}."""
    st = graph.steps
    if len(st) < 2:
        return []
    n = graph.nodes
    ts = n["ts_ns"].to_numpy(np.int64)
    meas = program_spans(graph, ts, ts + n["dur_ns"].to_numpy(np.int64))
    sig, ns = signature(graph), signature(graph, "cost_ns")
    fitting = _Fit(graph)
    out = []
    for i, step in enumerate(st["step"].to_numpy()):
        g = held_out(graph, i, sig, fitting, ns)
        if g is None or meas[i] < 0:
            continue
        s = simulate(g)
        pred = int(program_spans(g, s.start_ns, s.end_ns)[i]) if s.converged else -1
        others = np.delete(meas, i)
        others = others[others >= 0]
        out.append({"step": int(step), "measured_ns": int(meas[i]),
                    "predicted_ns": pred if pred >= 0 else None,
                    "baseline_ns": int(np.median(others)) if len(others) else None,
                    "learnt_from": int(alike(sig, i, ns).sum())})
    return out


def score(rows: list[dict]) -> dict | None:
    """{steps, replay_error_pct, baseline_error_pct (medians of |error| over the held-out
    steps), beats_baseline, outcome ("better", "tie": within ``TIE_PTS``, "worse"),
    replay_mean_error_pct, baseline_mean_error_pct (means of |error|: an odd step the
    replay predicts and the baseline misses counts there, not in the median),
    closer_steps (held-out steps the replay predicted closer than the baseline)} for
    ``leave_one_out`` rows; None without a prediction or with fewer than ``MIN_STEPS``
    steps (one other step: the baseline is that step, the model that step replayed)."""
    ok = [r for r in rows if r["predicted_ns"] is not None and r["baseline_ns"] is not None
          and r["measured_ns"] > 0]
    if not ok or len(rows) < MIN_STEPS:
        return None
    rep = np.array([abs(r["predicted_ns"] - r["measured_ns"]) / r["measured_ns"] for r in ok])
    base = np.array([abs(r["baseline_ns"] - r["measured_ns"]) / r["measured_ns"] for r in ok])
    r_pct, b_pct = 100 * float(np.median(rep)), 100 * float(np.median(base))
    outcome = "tie" if abs(r_pct - b_pct) <= TIE_PTS else \
        ("better" if r_pct < b_pct else "worse")
    return {"steps": len(ok), "replay_error_pct": round(r_pct, 2),
            "baseline_error_pct": round(b_pct, 2),
            "beats_baseline": outcome == "better", "outcome": outcome,
            "replay_mean_error_pct": round(100 * float(rep.mean()), 2),
            "baseline_mean_error_pct": round(100 * float(base.mean()), 2),
            "closer_steps": int((rep < base).sum())}
