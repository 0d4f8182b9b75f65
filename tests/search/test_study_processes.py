"""Two processes asking one persisted study at once: each enqueued trial goes to one of them.

Optuna hands out an enqueued trial by reading it as waiting, then marking it running. On
Postgres the read locks the row; on SQLite ``search.optimizer.storage_for`` makes every Optuna
transaction take the write lock first. Without that, two API processes on one SQLite file were
seen handing the same seed trial to two candidates (one of them then never told).
"""

from __future__ import annotations

import multiprocessing as mp

import optuna

from search.optimizer import close_storages, storage_for

SEEDS = 24


def _ask_all(url: str, out: mp.Queue, go: mp.Event) -> None:  # type: ignore[type-arg]
    study = optuna.load_study(study_name="seeded", storage=storage_for(url))
    go.wait(30)
    got = []
    for _ in range(SEEDS):
        trial = study.ask({"x": optuna.distributions.IntDistribution(0, 9_999)})
        got.append((trial.number, trial.params["x"]))
    out.put(got)


def test_two_processes_never_pop_the_same_enqueued_trial(database_url: str) -> None:
    url = database_url
    study = optuna.create_study(study_name="seeded", storage=storage_for(url))
    for x in range(SEEDS):
        study.enqueue_trial({"x": 10_000 + x})
    close_storages()
    ctx = mp.get_context("spawn")
    out, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_ask_all, args=(url, out, go)) for _ in range(2)]
    for p in procs:
        p.start()
    go.set()
    got = [item for _ in procs for item in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=30)
    numbers = [n for n, _ in got]
    seeds = [x for _, x in got if x >= 10_000]
    assert len(set(numbers)) == len(numbers) == 2 * SEEDS, "a trial was handed out twice"
    assert sorted(seeds) == [10_000 + x for x in range(SEEDS)], "a seed was handed out twice"
