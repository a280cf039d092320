"""Evaluation run states in the curation store, shared by the SQLite and the PostgreSQL tests: the migration that adds
them (runs written before it read back done; its downgrade keeps the finished runs only), and runs stored as they start
(running) and again as they end (done, or failed with the reason)."""

from __future__ import annotations

import time
from dataclasses import replace

from sqlalchemy import text

from gateway.curation.models import EvalRun
from gateway.curation.store import CurationStore
from tests.migration_support import columns, migrate_to, schema_drift

TENANT, SUITE = "acme", "office"
TABLE = "curation_eval_runs"
CASE = {"case_id": "case_1", "question": "本社の住所は？", "answer": "渋谷区神南2-3-4", "score": 0.75}


def _running(run_id: str, started_at: float) -> EvalRun:
    return EvalRun(
        id=run_id,
        tenant=TENANT,
        suite=SUITE,
        trigger="manual",
        score=None,
        cases=[],
        started_at=started_at,
        finished_at=None,
        state="running",
    )


async def eval_run_states_across_the_migration(url: str) -> None:
    """A database at 0005 with a finished run (as the gateway then wrote it) is upgraded: the run reads back done. A run
    stored running reads back so (no score, no finish time), only for its tenant and suite, then as it ended: done with
    its score and cases, or failed with its reason. The downgrade deletes the runs that are not done and restores the
    old columns; the upgrade again reads the rest back done; the schema at head is the tables' exactly."""
    store = CurationStore.open(url)
    try:
        await migrate_to(store, "0005")
        assert {"state", "error"}.isdisjoint(await columns(store, TABLE))
        now = time.time()
        async with store.engine.begin() as connection:
            await connection.execute(
                text(
                    f"INSERT INTO {TABLE} (id, tenant, suite, trigger, score, cases, started_at, finished_at) "
                    "VALUES ('run_legacy', :tenant, :suite, 'knowledge_change', 0.5, '[]', :started, :finished)"
                ),
                {"tenant": TENANT, "suite": SUITE, "started": now - 120, "finished": now - 100},
            )

        await store.migrate()
        await store.migrate()  # idempotent: start-up runs it on every boot
        assert await schema_drift(store) == []
        found = await columns(store, TABLE)
        assert (found["state"], found["error"], found["score"], found["finished_at"]) == (False, True, True, True)
        legacy = EvalRun("run_legacy", TENANT, SUITE, "knowledge_change", 0.5, [], now - 120, now - 100, "done")
        assert await store.eval_run(TENANT, SUITE, "run_legacy") == legacy

        running = _running("run_new", now - 10)
        await store.add_eval_run(running)
        assert await store.eval_run(TENANT, SUITE, running.id) == running
        assert await store.eval_run("globex", SUITE, running.id) is None  # another tenant's run is unknown to it
        assert await store.eval_run(TENANT, "other", running.id) is None
        assert await store.eval_runs(TENANT, SUITE) == [running, legacy]  # newest first, running ones included
        done = replace(running, state="done", score=0.75, cases=[CASE], finished_at=now)
        await store.update_eval_run(done)
        assert await store.eval_run(TENANT, SUITE, running.id) == done

        broken = _running("run_broken", now - 5)
        await store.add_eval_run(broken)
        failed = replace(broken, state="failed", finished_at=now, error="case case_2: Upstream provider unavailable")
        await store.update_eval_run(failed)
        await store.add_eval_run(_running("run_going", now - 1))
        assert [r.state for r in await store.eval_runs(TENANT, SUITE)] == ["running", "failed", "done", "done"]

        await migrate_to(store, "0005", down=True)
        found = await columns(store, TABLE)
        assert {"state", "error"}.isdisjoint(found)
        assert (found["score"], found["finished_at"]) == (False, False)
        async with store.engine.connect() as connection:  # the finished runs stay, the others had no score to keep
            kept = (await connection.execute(text(f"SELECT id FROM {TABLE}"))).scalars().all()
        assert set(kept) == {"run_legacy", "run_new"}

        await store.migrate()
        assert await store.eval_runs(TENANT, SUITE) == [done, legacy]
    finally:
        await store.close()


async def abandoned_runs_are_stored_failed(url: str) -> None:
    """Runs a stopped process left ``running``: those that started before the cut-off are stored failed with the
    reason and the time; a run still going (started after it) and finished runs stay as they are."""
    store = CurationStore.open(url)
    try:
        await store.migrate()
        now = time.time()
        left = _running("run_left", now - 7200)
        going = _running("run_going", now - 60)
        finished = replace(_running("run_finished", now - 9000), state="done", score=0.5, finished_at=now - 8000)
        for run in (left, going):
            await store.add_eval_run(run)
        await store.add_eval_run(_running(finished.id, finished.started_at))
        await store.update_eval_run(finished)

        assert await store.abandon_eval_runs(now - 3600, "abandoned", now=now) == 1
        assert await store.eval_run(TENANT, SUITE, left.id) == replace(
            left, state="failed", error="abandoned", finished_at=now
        )
        assert await store.eval_run(TENANT, SUITE, going.id) == going
        assert await store.eval_run(TENANT, SUITE, finished.id) == finished
        assert await store.abandon_eval_runs(now - 3600, "abandoned", now=now) == 0  # nothing left to abandon
    finally:
        await store.close()
