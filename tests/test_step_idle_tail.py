"""The steps table's GPU idle is the gaps ended by work the step launched: the window's tail
after the device's last op is ended by no op, so it is no step's (it was the last step's)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import analysed

H200 = Path(__file__).parent / "fixtures" / "h200" / "pageable.bad.json.gz"


def test_the_window_tail_is_no_steps_idle():
    a = analysed(H200)
    g = a.gaps
    last_op_ts = int(a.ops["ts"].max()) if hasattr(a, "ops") and a.ops is not None else None
    tail = g["end"].to_numpy(np.int64) == int(g["end"].max())
    assert tail.sum() == 1 and int(g.loc[tail, "duration"].iloc[0]) > 1_000_000   # 2 ms of tail
    assert int(g.loc[tail, "step_index"].iloc[0]) == -1
    if last_op_ts is not None:
        assert int(g.loc[tail, "start"].iloc[0]) >= last_op_ts
    idle = a.steps["idle_ns"].to_numpy(np.int64)
    # the last step idles as the steady ones do (2.4 ms a step), not plus the tail (4.5 ms)
    mid = np.median(idle[1:-1])
    assert abs(idle[-1] - mid) < 0.1 * mid
