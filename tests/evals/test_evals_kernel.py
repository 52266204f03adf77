"""Evals on real kernels with offline models that answer some cases right and some wrong: the
DABench sample, every check kind, the budget stop, resume after a kill, the CLI and its report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "dabench-sample"
sys.path.insert(0, str(HERE))

pytest.importorskip("pydantic_evals")

from flue_nb.evals import run_eval
from flue_nb.evals.pytest_plugin import flue_eval  # noqa: F401 - the fixture, as a user's conftest enables it

pytestmark = pytest.mark.kernel


def _run(dataset, tmp_path, **kw):
    kw.setdefault("db", str(tmp_path / "evals.sqlite"))
    kw.setdefault("timeout", 120)
    return run_eval(dataset, pythonpath=[str(HERE)], **kw)


def _conversation_count(db, conversation):
    from flue_nb.runtime.store.url import open_any

    store = open_any(db, cwd=os.getcwd())
    try:
        return len(store.submissions(conversation))
    finally:
        store.close()


def test_the_dabench_sample_is_scored_from_the_answers(tmp_path):
    report = _run(str(DATA), tmp_path, model="eval_models:dabench", concurrency=2)
    by_id = {c.id: c for c in report.cases}
    assert len(report.cases) == 16
    # Two computed in the kernel with the python tool, three answered right from memory.
    assert sorted(c.id for c in report.cases if c.passed) == ["132", "24", "421", "523", "683"]
    assert report.score == 5 / 16
    assert by_id["24"].answer.endswith("@mean_age[39.21]") and by_id["24"].tool_calls == 1
    assert by_id["132"].answer.endswith("@outlier_count[20]")
    # Half right is wrong (every named value must match), and says which one.
    assert by_id["496"].status == "failed" and "@mean_STEM[99.99] (label 125.11)" in by_id["496"].reason
    assert by_id["496"].checks["closed_form_share"]["value"] == 0.5
    assert by_id["418"].passed is False and "@outliers_count[3] (label 1)" in by_id["418"].reason
    assert "@mse missing" in by_id["671"].reason
    # Each case's conversation is in the store, one submission each.
    assert _conversation_count(report.db, by_id["24"].conversation) == 1


def test_each_check_kind_passes_and_fails_on_what_the_agent_did(tmp_path):
    report = _run(str(HERE / "data" / "checks.jsonl"), tmp_path, model="eval_models:checks", concurrency=2)
    by_id = {c.id: c for c in report.cases}
    assert {k: c.status for k, c in by_id.items()} == {
        "exact": "passed",
        "normalised": "failed",  # the normalised check passes, the exact one does not
        "number-right": "passed",
        "number-wrong": "failed",
        "regex": "passed",
        "python": "passed",
        "judge-pass": "passed",
        "judge-fail": "failed",
    }
    norm = by_id["normalised"].checks
    assert norm["NormalizedText"]["value"] is True and norm["ExactText"]["value"] is False
    assert by_id["normalised"].score == 0.5
    assert "expected 3.14159 ± 0.001, the answer says 3.5" in by_id["number-wrong"].reason
    # The python checks read the kernel's final namespace (df from the starting notebook, df_clean
    # from the agent's python call) and the files it left.
    py = by_id["python"].checks
    assert py["no nulls"]["value"] and py["clean.csv saved"]["value"]
    assert py["checks_lib:three_rows"] == {"value": True, "reason": "df_clean has 3 rows"}
    assert by_id["python"].tool_calls == 1
    assert by_id["python"].input_tokens == 1900 and by_id["python"].output_tokens == 60
    assert by_id["judge-fail"].checks["judge"]["reason"] == "the answer gives no reason"
    assert by_id["judge-pass"].checks["judge_score"]["value"] == 0.9
    assert report.score == 5 / 8


def test_a_python_check_that_fails_says_so(tmp_path):
    from pydantic_evals import Case, Dataset

    from flue_nb.evals import NotebookTask, PythonCheck

    task = NotebookTask(
        "Please clean the table df: drop rows with missing values into df_clean and save clean.csv.",
        files=["sales.csv"],
        notebook="start.ipynb",
        base=str(HERE / "data"),
    )
    ds = Dataset(
        name="one",
        cases=[
            Case(
                name="five-rows",
                inputs=task,
                evaluators=(
                    PythonCheck(lambda ns, files: len(ns["df_clean"]) == 5, name="five rows"),
                    PythonCheck(expr="missing_name > 0", name="missing"),
                ),
            )
        ],
    )
    report = _run(ds, tmp_path, model="eval_models:checks")
    (case,) = report.cases
    assert case.status == "failed" and case.score == 0.0
    assert case.checks["five rows"]["value"] is False
    assert case.checks["missing"]["reason"] == "the check raised NameError: name 'missing_name' is not defined"


def _budget_dataset(tmp_path, n=5):
    path = tmp_path / "budget.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "prompt": f"question {i}", "checks": [{"closed_form": {"answer": "1"}}]}) + "\n"
            for i in range(n)
        )
    )
    return path


def test_max_cost_stops_cleanly_and_reports_the_cases_it_did_not_run(tmp_path):
    # Each answer costs 20,000 x $1/M + 500 x $5/M = $0.0225 at Claude Haiku 4.5's list prices.
    report = _run(str(_budget_dataset(tmp_path)), tmp_path, model="eval_models:priced", max_cost=0.05, run="budget")
    statuses = [c.status for c in report.cases]
    ran = [c for c in report.cases if c.status == "passed"]
    assert len(ran) == 2 and statuses[:2] == ["passed", "passed"]
    assert set(statuses[2:]) == {"not_run"}
    assert report.cost_usd == pytest.approx(0.045) and report.cost_usd <= 0.05
    assert report.stopped and "budget" in report.stopped
    assert all(c.passed is None and c.cost_usd == 0 for c in report.cases[2:])
    data = report.to_dict()
    assert data["not_run"] == 3 and data["passed"] == 2 and data["score"] == 0.4
    # A bigger budget resumes the run: the two finished cases are kept, the three others run.
    again = _run(str(_budget_dataset(tmp_path)), tmp_path, model="eval_models:priced", max_cost=1.0, run="budget")
    assert [c.resumed for c in again.cases] == [True, True, False, False, False]
    assert [c.status for c in again.cases] == ["passed"] * 5
    assert _conversation_count(again.db, again.cases[0].conversation) == 1


def _cli(*args, cwd, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "flue_nb.cli", "eval", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
        **kw,
    )


@pytest.mark.crash
def test_a_killed_run_resumes_without_running_its_finished_cases_again(tmp_path):
    ds = tmp_path / "resume.jsonl"
    ds.write_text(
        "".join(
            json.dumps({"id": name, "prompt": f"answer {name}", "checks": [{"contains": f"done: {name}"}]}) + "\n"
            for name in ("first", "slow", "last")
        )
    )
    db = tmp_path / "evals.sqlite"
    args = [str(ds), "--model", "eval_models:resumable", "--db", str(db), "--run", "r1", "--no-progress"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "flue_nb.cli", "eval", *args],
        cwd=HERE,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run_dir = tmp_path / "evals" / "r1"
    try:
        deadline = time.monotonic() + 240
        while not ((run_dir / "first" / "result.json").exists() and (run_dir / "slow" / "attempts").exists()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(3)  # the slow case's kernel is up and its model call is waiting
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (run_dir / "slow" / "result.json").exists()
    # The store decides what finished: without its result.json (as after a crash between the
    # case's end and the file) the first case is still taken from the store, not run again.
    (run_dir / "first" / "result.json").unlink()
    out = tmp_path / "report.json"
    done = _cli(*args, "--out", str(out), cwd=HERE, env={"FLUE_EVAL_TEST_FAST": "1"})
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    cases = {c["id"]: c for c in report["cases"]}
    assert [c["status"] for c in report["cases"]] == ["passed"] * 3
    assert cases["first"]["resumed"] and not cases["slow"]["resumed"]
    # The finished case was not run again: its conversation holds its one submission.
    assert _conversation_count(str(db), "eval-r1-first") == 1
    assert cases["slow"]["conversation"] == "eval-r1-slow-2"  # a fresh conversation for the new attempt


def test_cli_exit_status_follows_min_score_and_the_json_report_has_its_keys(tmp_path):
    ds = str(HERE / "data" / "checks.jsonl")
    out = tmp_path / "report.json"
    common = [
        "--model",
        "eval_models:checks",
        "--db",
        str(tmp_path / "e.sqlite"),
        "--concurrency",
        "2",
        "--no-progress",
    ]
    low = _cli(ds, *common, "--min-score", "0.6", "--out", str(out), "--run", "a", cwd=HERE)
    assert low.returncode == 0, low.stderr
    assert "score 0.62 (5/8 passed, 3 failed)" in low.stdout
    assert "case" in low.stdout.splitlines()[0] and "reason" in low.stdout.splitlines()[0]
    report = json.loads(out.read_text())
    assert {"score", "cases"} <= set(report) and report["score"] == 5 / 8
    for case in report["cases"]:
        assert {"id", "passed", "answer", "reason", "cost_usd", "input_tokens", "output_tokens", "error"} <= set(case)
    high = _cli(ds, *common, "--min-score", "0.9", "--run", "a", cwd=HERE)  # resumed: nothing runs again
    assert high.returncode == 1
    assert "score 0.62 is below --min-score 0.9" in high.stderr
    bad = _cli(ds, "--model", "eval_models:nothing_here", "--db", str(tmp_path / "e.sqlite"), cwd=HERE)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "flue-nb eval: --model eval_models:nothing_here: eval_models has no nothing_here"


def test_percent_flue_eval_in_a_kernel_shows_the_table_and_a_drill_down(tmp_path):
    sys.path.insert(0, str(HERE.parent / "notebook"))
    from kernel_helpers import Kernel

    k = Kernel(tmp_path, HERE, PYTHONPATH=str(HERE))
    try:
        db = tmp_path / "evals.sqlite"
        run = k.ok(
            f"%flue eval data/checks.jsonl --model eval_models:checks --db {db} --run nb --concurrency 2", timeout=300
        )
        assert "score 0.62 (5/8 passed, 3 failed)" in run.stdout
        assert "number-wrong  ✗" in run.stdout
        html = run.text("text/html")
        assert "<details><summary>number-wrong: failed</summary>" in html
        assert "expected 3.14159 ± 0.001, the answer says 3.5" in html
        shown = k.ok("%flue eval show python").stdout
        assert "checks:\n  no nulls: True" in shown
        assert f"open it: %flue chat -c eval-nb-python --db {db}" in shown
        assert k.ok("_flue_eval.score").text() == "0.625"
        failed = k.run(f"%flue eval data/checks.jsonl --model eval_models:checks --db {db} --run nb --min-score 0.9")
        assert failed.status == "error" and "score 0.62 is below --min-score 0.9" in failed.error_text
    finally:
        k.shutdown()


def test_an_agent_under_test_gets_the_run_s_model(tmp_path):
    ds = tmp_path / "agent.jsonl"
    ds.write_text(json.dumps({"id": "a", "prompt": "[exact] six times seven?", "checks": [{"exact": "42"}]}) + "\n")
    report = _run(str(ds), tmp_path, model="eval_models:checks", agent="eval_agents:terse")
    (case,) = report.cases
    assert case.status == "passed", case.error
    from flue_nb.runtime.store.url import open_any

    store = open_any(report.db, cwd=os.getcwd())
    try:
        (sub,) = store.submissions(case.conversation)
        assert sub.settings == {"agent": "terse"}  # the agent under test answered, not the assistant
    finally:
        store.close()


def test_the_pytest_fixture_passes_at_the_threshold_and_fails_below_it(flue_eval):  # noqa: F811 - the fixture
    ds = str(HERE / "data" / "checks.jsonl")
    report = flue_eval(ds, model="eval_models:checks", min_score=0.6, pythonpath=[str(HERE)], concurrency=2, run="ci")
    assert report.score == 5 / 8
    with pytest.raises(pytest.fail.Exception) as failed:  # the same run, resumed: nothing runs again
        flue_eval(ds, model="eval_models:checks", min_score=0.7, pythonpath=[str(HERE)], run="ci")
    assert str(failed.value).startswith("eval score 0.62 is below 0.7:\ncase")


def test_a_case_past_its_timeout_ends_as_an_error_and_the_others_still_run(tmp_path):
    data = tmp_path / "timeouts.jsonl"
    cases = [
        {"id": "stuck", "prompt": "[stuck] What is six times seven?", "checks": [{"exact": "42"}]},
        {"id": "quick", "prompt": "[quick] What is six times seven?", "checks": [{"exact": "42"}]},
    ]
    data.write_text("".join(json.dumps(c) + "\n" for c in cases))
    report = _run(str(data), tmp_path, model="eval_models:slow", timeout=20, concurrency=2)
    by_id = {c.id: c for c in report.cases}
    assert by_id["stuck"].status == "error" and by_id["stuck"].passed is False, by_id["stuck"]
    assert (by_id["stuck"].error or "").startswith("timeout: the case took longer than 20 s"), by_id["stuck"].error
    assert by_id["quick"].passed is True
    assert report.score == 1 / 2


def test_a_timed_out_case_keeps_its_timeout_whatever_the_store_recorded(tmp_path):
    # Stopping a timed-out case's kernel aborts its submission; on a loaded machine the store has
    # recorded that abort by the time the result is read, and it must not replace the timeout.
    from flue_nb.evals.kernel_case import CaseRun, read_store
    from flue_nb.runtime.store import Outcome
    from flue_nb.runtime.store.sqlite import SQLiteStore

    db = str(tmp_path / "evals.sqlite")
    store = SQLiteStore(db)
    store.admit("c", "[stuck] What is six times seven?", submission_id="s1", now=1.0)
    aborted = {"type": "submission_aborted", "message": "the submission was aborted by the user"}
    store.settle("s1", Outcome.ABORTED, error=aborted, now=2.0)
    store.close()
    timed_out = CaseRun(case="stuck", conversation="c", error="timeout: the case took longer than 20 s")
    read_store(db, timed_out)
    assert timed_out.error == "timeout: the case took longer than 20 s" and timed_out.outcome == "aborted"
    failed = CaseRun(case="other", conversation="c", error="the prompt failed: KeyboardInterrupt")
    read_store(db, failed)
    assert failed.error == "submission_aborted: the submission was aborted by the user"  # says more
