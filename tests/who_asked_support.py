"""Who asked, in the curation store, shared by the SQLite and the PostgreSQL tests: the migration that adds it (rows
written before it read back as asked by nobody known, hence tenant-open), and that what the gateway writes now keeps
the reader's user id, visibility key and visible tags, the feedback's asker, a suite's ``run_as`` and a run's."""

from __future__ import annotations

import time

from sqlalchemy import text

from gateway.access.identity import Reader
from gateway.curation.askers import Asker, RunAs
from gateway.curation.models import AnswerRecord, EvalRun, Feedback, RetrievedDocument
from gateway.curation.store import CurationStore
from pipelines.shared.visibility import Visibility
from tests.migration_support import columns, migrate_to, schema_drift

TENANT = "acme"
TENANT_OPEN = Visibility.tenant_only(unset_open=True)
ALICE = Reader("alice", frozenset({"hr", "finance"}), Visibility.of({"hr", "finance"}, unset_open=True), "token")
ADMIN = Reader("root", frozenset(), Visibility.everything(), "header")


def record(record_id: str, at: float, reader: Reader | None) -> AnswerRecord:
    return AnswerRecord(
        id=record_id,
        tenant=TENANT,
        trace_id=None,
        route="single_hop",
        reasons=["abstained"],
        verdicts=["incorrect"],
        top_k=4,
        documents=[RetrievedDocument("doc-1", "Doc", 0.42)],
        cited=["doc-1"],
        answer="The documents do not say.",
        question=f"question of {record_id}?",
        embedding=[0.1, 0.2, 0.3],
        created_at=at,
        asker=Asker.of(reader),
    )


async def _legacy_rows(store: CurationStore, at: float) -> None:
    """An answer record, feedback on it and a finished run, as the gateway wrote them at 0007."""
    async with store.engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO curation_answer_records (id, tenant, trace_id, route, reasons, verdicts, top_k, "
                "documents, cited, answer, question, embedding, created_at) "
                "VALUES ('resp_legacy', :tenant, NULL, 'single_hop', "
                """'["abstained"]', '{"retrieval": ["incorrect"], "checks_failed": []}', 4, '[]', '[]', 'no idea', """
                "'where is the office?', '[1.0, 0.0]', :at)"
            ),
            {"tenant": TENANT, "at": at},
        )
        await connection.execute(
            text(
                "INSERT INTO curation_feedback (id, tenant, response_id, trace_id, rating, comment, expected_answer, "
                "question, documents, cited, created_at) VALUES ('fb_legacy', :tenant, 'resp_legacy', NULL, 'down', "
                "NULL, NULL, 'where is the office?', '[]', '[\"doc-1\"]', :at)"
            ),
            {"tenant": TENANT, "at": at},
        )
        await connection.execute(
            text(
                'INSERT INTO curation_eval_runs (id, tenant, suite, "trigger", score, cases, started_at, finished_at, '
                "state) VALUES ('run_legacy', :tenant, 'office', 'manual', 0.5, '[]', :at, :at, 'done')"
            ),
            {"tenant": TENANT, "at": at},
        )


async def who_asked_across_the_migration(url: str) -> None:
    """A database at 0007 with an answer record, feedback and a run is upgraded: they read back with no asker known
    (the record's visibility the tenant-open one, its re-run reader the reader of no user) and the run with no
    run_as. What is written now keeps who asked: a user's restricted view, an unrestricted one, none named; feedback
    with its answer's asker; a suite's run_as and a run's. Down to 0007 (the rows stay) and up again; the schema at
    head is the tables' exactly."""
    store = CurationStore.open(url)
    try:
        await migrate_to(store, "0007")
        assert "user_id" not in await columns(store, "curation_answer_records")
        now = time.time()
        await _legacy_rows(store, now - 60)

        await store.migrate()
        await store.migrate()  # idempotent: start-up runs it on every boot
        assert await schema_drift(store) == []
        (legacy,) = await store.open_records(TENANT)
        assert legacy.asker == Asker()
        assert not legacy.asker.known
        assert legacy.asker.visibility(TENANT_OPEN) == TENANT_OPEN
        nobody = Reader(None, frozenset(), TENANT_OPEN, "none")
        assert legacy.asker.reader(nobody) is nobody
        (legacy_feedback,) = await store.feedback_of(TENANT)
        assert (legacy_feedback.asker, legacy_feedback.cited) == (Asker(), ["doc-1"])
        legacy_run = await store.eval_run(TENANT, "office", "run_legacy")
        assert legacy_run is not None
        assert (legacy_run.run_as, legacy_run.score) == (None, 0.5)

        await store.add_records(
            [record("resp_alice", now - 3, ALICE), record("resp_admin", now - 2, ADMIN), record("resp_anon", now, None)]
        )
        found = {r.id: r.asker for r in await store.open_records(TENANT)}
        assert found["resp_alice"] == Asker("alice", ALICE.visibility.key(), ("*", "finance", "hr", "~"), "token")
        assert found["resp_admin"] == Asker("root", "all", None, "header")
        assert found["resp_anon"] == Asker()
        # A re-run reads the recorded view exactly, whatever the tenant's policy for unset documents is now.
        again = found["resp_alice"].reader(Reader(None, frozenset(), Visibility.tenant_only(unset_open=False), "none"))
        assert again == Reader("alice", frozenset({"hr", "finance"}), ALICE.visibility, "token")
        assert found["resp_admin"].reader(nobody).visibility == Visibility.everything()
        by_trace = await store.find_record(response_id="resp_alice", trace_id=None)
        assert by_trace is not None
        assert by_trace.asker.user_id == "alice"

        await store.add_feedback(
            Feedback(
                id="fb_alice",
                tenant=TENANT,
                response_id="resp_alice",
                trace_id=None,
                rating="down",
                comment=None,
                expected_answer=None,
                question="question of resp_alice?",
                documents=[],
                cited=["doc-1"],
                created_at=now,
                asker=found["resp_alice"],
            )
        )
        rated = {f.id: f.asker for f in await store.feedback_of(TENANT)}
        # Feedback keeps who asked and what they saw; how they were learnt stays with the record.
        assert rated["fb_alice"] == Asker("alice", ALICE.visibility.key(), ("*", "finance", "hr", "~"))

        carol = RunAs("carol", ("eng", "ops"))
        assert await store.suite_run_as(TENANT, "office") is None
        await store.set_suite_run_as(TENANT, "office", carol)
        assert await store.suite_run_as(TENANT, "office") == carol
        assert await store.suite_run_as("globex", "office") is None  # another tenant's suite of the same name
        await store.set_suite_run_as(TENANT, "office", None)
        assert await store.suite_run_as(TENANT, "office") is None
        run = EvalRun("run_carol", TENANT, "office", "manual", None, [], now, None, "running", run_as=carol)
        await store.add_eval_run(run)
        stored = await store.eval_run(TENANT, "office", "run_carol")
        assert stored == run

        await migrate_to(store, "0007", down=True)
        assert {"user_id", "visibility_key", "visible_tags", "reader_source"}.isdisjoint(
            await columns(store, "curation_answer_records")
        )
        assert "run_as" not in await columns(store, "curation_eval_runs")
        async with store.engine.connect() as connection:  # the rows stay; only who asked goes
            ids = (await connection.execute(text("SELECT id FROM curation_answer_records"))).scalars().all()
        assert set(ids) == {"resp_legacy", "resp_alice", "resp_admin", "resp_anon"}
        await store.migrate()
        assert {r.asker for r in await store.open_records(TENANT)} == {Asker()}
        assert await schema_drift(store) == []
    finally:
        await store.close()
