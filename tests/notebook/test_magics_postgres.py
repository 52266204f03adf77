"""`%%flue --db postgresql://...`, `c.FlueMagics.db` and `$FLUE_DB` in a real kernel."""

from __future__ import annotations

import pytest
from kernel_helpers import Kernel

pytestmark = pytest.mark.kernel

SETUP = """
from flue_nb.models import FunctionModel, reply
echo = FunctionModel(lambda req: reply("pg: " + [m for m in req.messages if m.kind == "user"][-1].text))
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("work"))
    k.ok(SETUP)
    yield k
    k.shutdown()


def _count(url: str, conversation: str) -> int:
    from flue_nb.runtime.store.postgres import PostgresStore

    with PostgresStore(url) as store:
        return len(store.submissions(conversation))


def test_db_option_config_and_environment_select_a_postgres_store(kernel, pg_server):
    secret = "hunter2-" + "z" * 6
    by_option = pg_server.create_database().replace("postgres@", f"postgres:{secret}@")
    run = kernel.ok(f"%%flue -c team:pg -m echo --db {by_option}\nhello")
    assert "pg: hello" in run.text()
    status = kernel.ok(f"%flue status -c team:pg --db {by_option}").text()
    assert secret not in status and secret not in run.text()
    assert _count(by_option, "team:pg") == 1

    by_config = pg_server.create_database()
    kernel.ok(f"%config FlueMagics.db = {by_config!r}")
    assert "pg: configured" in kernel.ok("%flue -c team:pg -m echo configured").text()
    assert _count(by_config, "team:pg") == 1
    kernel.ok("%config FlueMagics.db = ''")

    by_env = pg_server.create_database()
    kernel.ok(f"import os; os.environ['FLUE_DB'] = {by_env!r}")
    assert "pg: from env" in kernel.ok("%flue -c team:pg -m echo from env").text()
    assert _count(by_env, "team:pg") == 1
    assert kernel.ok("import sys; print('psycopg' in sys.modules)").stdout.strip() == "True"
