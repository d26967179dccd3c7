"""Parallel jobs of one configuration compute each row once (eval.store.claims): a job claims an
item before generating it, puts off an item another process holds, and reads its rows back after."""

from __future__ import annotations

import multiprocessing
import os
import sys

import pytest

import eval.run as entry
from eval.conf.compose import compose_config
from eval.measure import realized
from eval.measure.pairs import load_pair, pair_args
from eval.store.claims import Claims
from eval.store.storage import iter_shards, read_row

JOB = ["model=tiny_random", "dataset=gsm8k", "limit=2", "max_new_tokens=4", "progress=false", "warmup=false",
       "method=rheo", "method.k=4", "method.depth=2", "method.tree_size=6", "num_threads=1"]
FORK = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None


def _hold(cdir, gate, done):
    """Another process: claims item 0 of gsm8k, says so, keeps it until told."""
    claims = Claims()
    claims.take(cdir, "gsm8k", 0)
    gate.set()
    done.wait(10)


@pytest.mark.skipif(FORK is None, reason="fork-started processes (Linux)")
def test_a_claim_held_by_another_process_is_refused_until_it_ends(tmp_path):
    gate, done = FORK.Event(), FORK.Event()
    other = FORK.Process(target=_hold, args=(tmp_path, gate, done))
    other.start()
    assert gate.wait(10)
    mine = Claims()
    assert not mine.take(tmp_path, "gsm8k", 0)  # held elsewhere
    assert mine.take(tmp_path, "gsm8k", 1)  # another item is free
    done.set()
    other.join(10)
    assert mine.take(tmp_path, "gsm8k", 0, wait=True)  # it ended: the claim is free
    mine.close()


def _job(cfg, barrier, results):
    """One job of two: both have listed their pending rows (all of them) before either generates."""
    start = realized.Realized.start

    def start_together(self, pair, pending):
        barrier.wait(60)
        start(self, pair, pending)

    realized.Realized.start = start_together
    summary = entry.run(cfg)
    results.put((os.getpid(), summary.computed, summary.skipped))


@pytest.mark.slow
@pytest.mark.skipif(FORK is None, reason="fork-started processes (Linux)")
def test_two_parallel_jobs_of_one_configuration_compute_each_row_once(tmp_path):
    cfg = compose_config(JOB + [f"output_dir={tmp_path}"])
    load_pair(*pair_args(cfg))  # the imports and the pair's code, once, before the two jobs fork
    barrier, results = FORK.Barrier(2), FORK.Queue()
    jobs = [FORK.Process(target=_job, args=(cfg, barrier, results)) for _ in range(2)]
    for job in jobs:
        job.start()
    got = [results.get(timeout=120) for _ in jobs]
    for job in jobs:
        job.join(30)
    assert all(job.exitcode == 0 for job in jobs)
    rows = [read_row(p) for p in iter_shards(tmp_path)]
    assert len(rows) == 4  # 2 items x (Rheo, its AR baseline)
    assert sum(computed for _, computed, _ in got) == 4  # each row computed once, by one of the two
    assert all(computed + skipped == 4 for _, computed, skipped in got)  # the other read it back
